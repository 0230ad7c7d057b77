"""The page in a real browser: headless Chromium from the system's packages, driven by Selenium
through the system's chromedriver (Selenium is never allowed to fetch a driver or a browser).

Skips only where no Chromium or chromedriver is installed (`.ci/run` installs them where it can).
Set ANYFORMER_SCREENSHOTS=DIR to keep the pages' screenshots (docs/screenshots/ holds the ones
the docs show)."""
from __future__ import annotations

import base64
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.serve.conftest import live_server

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: pip install -e '.[test]'")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

BROWSER = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
DRIVER = shutil.which("chromedriver")
if BROWSER is None or DRIVER is None:
    pytest.skip(f"no system Chromium and chromedriver (found browser {BROWSER}, driver {DRIVER}); "
                f"install them, e.g. apt-get install chromium chromium-driver", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager may not download anything
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = BROWSER
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=960,620", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def by_testid(driver, name):
    return driver.find_element(By.CSS_SELECTOR, f'[data-testid="{name}"]')


def screenshot(driver, name: str, tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ANYFORMER_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 1000
    return path


def prediction_rows(driver) -> list[list[str]]:
    """The shown classes' rows, read in one script call: the page replaces its list on every answer,
    so rows found by Selenium and then read one by one can go stale in between (seen under load)."""
    return [row.split() for row in driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-testid=\"prediction\"] li'), li => li.innerText)")]


def draw(driver, canvas, strokes):
    """Mouse strokes on the canvas; points are offsets from its centre, in small steps so that the
    page sees a stream of pointer moves, as from a hand."""
    for stroke in strokes:
        chain = ActionChains(driver).move_to_element_with_offset(canvas, *stroke[0]).click_and_hold()
        for (x0, y0), (x1, y1) in zip(stroke, stroke[1:]):
            steps = max(1, int(max(abs(x1 - x0), abs(y1 - y0)) // 12))
            for i in range(1, steps + 1):
                chain.move_to_element_with_offset(canvas, round(x0 + (x1 - x0) * i / steps),
                                                  round(y0 + (y1 - y0) * i / steps))
        chain.release().perform()


ONE = [[(6, -90), (-6, 90)]]  # the digit this tiny model reads surely; a 7 or a 0 it often misreads


@pytest.mark.slow
def test_drawing_a_digit_shows_top_classes_and_the_attention(vit_run, browser, tmp_path):
    from anyformer.serve import create_app
    from starlette.testclient import TestClient
    app = create_app(str(vit_run))
    with live_server(app) as url:
        browser.get(url)
        # Nothing yet: no empty or broken image. Asked until the page has built itself (an element found
        # while its section is being rendered can go stale before it is read: seen once under load).
        WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: not by_testid(d, "attention").is_displayed())
        canvas = by_testid(browser, "canvas")
        draw(browser, canvas, ONE)
        wait = WebDriverWait(browser, 30)
        wait.until(lambda d: len(prediction_rows(d)) == 3)
        wait.until(lambda d: (by_testid(d, "attention").get_attribute("src") or "").startswith("data:image/png"))
        # The page settles on what the API says for the canvas as drawn (the debounced request after
        # the last stroke may still be on its way), and the model reads the 1.
        png = base64.b64decode(browser.execute_script("return arguments[0].toDataURL('image/png')", canvas)
                               .split(",", 1)[1])
        api = TestClient(app).post("/api/predict", content=png, headers={"content-type": "image/png"}).json()
        expected = [(t["class"], round(100 * t["probability"], 1)) for t in api["top"]]

        def shown_now(d):
            return [(cls, float(pct.rstrip("%"))) for cls, pct in prediction_rows(d)]
        wait.until(lambda d: shown_now(d) == expected)
        shown = shown_now(browser)
        assert [p for _, p in shown] == sorted((p for _, p in shown), reverse=True)
        assert shown[0][0] == "1", shown
        heat = by_testid(browser, "attention")
        assert heat.is_displayed() and heat.size["width"] >= 100
        assert browser.execute_script("return arguments[0].naturalWidth", heat) >= 28  # a decoded image
        assert not by_testid(browser, "error").is_displayed()
        screenshot(browser, "classifier.png", tmp_path)


@pytest.mark.slow
def test_a_bad_upload_shows_an_error_and_the_page_keeps_working(vit_run, browser, tmp_path):
    from anyformer.serve import create_app
    bad = tmp_path / "notes.png"
    bad.write_text("this is not a picture")
    with live_server(create_app(str(vit_run))) as url:
        browser.get(url)
        draw(browser, by_testid(browser, "canvas"), ONE)  # an answer first: the failed upload must clear it
        WebDriverWait(browser, 30).until(lambda d: by_testid(d, "attention").is_displayed())
        time.sleep(1.0)  # the drawing's last (debounced) answer lands before the upload, not after its error
        by_testid(browser, "upload").send_keys(str(bad))
        WebDriverWait(browser, 30).until(lambda d: by_testid(d, "error").is_displayed())
        assert "not an image" in by_testid(browser, "error").text and "400" in by_testid(browser, "error").text
        assert prediction_rows(browser) == []
        assert not by_testid(browser, "attention").is_displayed()
        draw(browser, by_testid(browser, "canvas"), ONE)  # the same server answers the next request
        WebDriverWait(browser, 30).until(lambda d: not by_testid(d, "error").is_displayed())
        WebDriverWait(browser, 30).until(lambda d: len(prediction_rows(d)) == 3)


@pytest.mark.slow
def test_generated_text_streams_into_the_page(lm_run, browser, tmp_path, monkeypatch):
    from anyformer.data.text.tokenizers import tokenizer_from_info
    from anyformer.models import GPT, read_config
    from anyformer.serve import create_app
    alphabet = set(tokenizer_from_info(read_config(lm_run)["data"]).chars)
    app = create_app(str(lm_run))  # measures its step times on the model as it is
    # The tiny model samples 120 tokens in a few milliseconds; on a loaded host the browser can then
    # read them in as few as 4 pieces (CI saw [39, 57, 89, 125]). Pacing each token at 20 ms makes
    # the stream's pieces arrive apart on any host, so the page's rendering is what is tested.
    unpaced = GPT.stream

    def paced(self, *args, **kwargs):
        tokens = unpaced(self, *args, **kwargs)
        try:
            for token in tokens:
                time.sleep(0.02)
                yield token
        finally:
            tokens.close()

    monkeypatch.setattr(GPT, "stream", paced)
    with live_server(app) as url:
        browser.get(url)
        prompt = by_testid(browser, "prompt")
        prompt.clear()
        prompt.send_keys("KING:")
        browser.find_element(By.ID, "max-new-tokens").clear()
        browser.find_element(By.ID, "max-new-tokens").send_keys("120")
        browser.find_element(By.ID, "seed").send_keys("3")
        # Every change to the output is recorded with its length: streamed text grows in many steps,
        # a response shown at once would be one.
        browser.execute_script("""
            window.lengths = [];
            new MutationObserver(() => window.lengths.push(arguments[0].textContent.length))
              .observe(arguments[0], {childList: true, characterData: true, subtree: true});""",
                               by_testid(browser, "output"))
        browser.find_element(By.ID, "generate").click()
        WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "generate").is_enabled()
                                         and len(by_testid(d, "output").text) > 5)
        text = by_testid(browser, "output").get_attribute("textContent")
        assert text.startswith("KING:") and len(text) == len("KING:") + 120, text
        assert set(text[5:]) <= alphabet
        growth = [n for n in browser.execute_script("return window.lengths") if n > len("KING:")]
        assert len(set(growth)) >= 5 and growth == sorted(growth), growth
        assert not by_testid(browser, "error").is_displayed()
        screenshot(browser, "language_model.png", tmp_path)


@pytest.mark.slow
def test_a_typed_text_is_classified_as_the_api_says(text_run, browser, tmp_path):
    from anyformer.serve import create_app
    from starlette.testclient import TestClient
    app = create_app(str(text_run))
    sentence = "Rain and a storm tomorrow, then sun — ☀️ café"
    with live_server(app) as url:
        browser.get(url)
        note = by_testid(browser, "length-note").text
        assert "cooking, sport, weather" in note and "tokens" in note
        by_testid(browser, "text").send_keys(sentence)
        by_testid(browser, "predict").click()
        WebDriverWait(browser, 30).until(lambda d: len(prediction_rows(d)) == 3)
        api = TestClient(app).post("/api/predict", json={"text": sentence}).json()["predictions"][0]
        expected = sorted(((c, round(100 * q, 1)) for c, q in api["probabilities"].items()), key=lambda cq: -cq[1])
        shown = [(cls, float(pct.rstrip("%"))) for cls, pct in prediction_rows(browser)]
        assert shown == expected
        assert not by_testid(browser, "error").is_displayed()
        screenshot(browser, "text_classifier.png", tmp_path)
        # An empty box is refused by the server, and the page says so and clears the old answer.
        by_testid(browser, "text").clear()
        by_testid(browser, "predict").click()
        WebDriverWait(browser, 30).until(lambda d: by_testid(d, "error").is_displayed())
        assert "is blank" in by_testid(browser, "error").text and "400" in by_testid(browser, "error").text
        assert prediction_rows(browser) == []


@pytest.mark.slow
def test_a_server_with_a_token_lets_the_browser_in_through_its_one_time_url(vit_run, browser):
    from anyformer.serve import create_app
    token = "token-for-the-browser-test-0123"
    with live_server(create_app(str(vit_run), token=token)) as url:
        browser.get(url)
        assert "no token came" in browser.find_element(By.TAG_NAME, "body").text  # the 401's one line
        browser.get(f"{url}/?token={token}")
        assert browser.current_url == f"{url}/"  # the token left the address bar
        draw(browser, by_testid(browser, "canvas"), ONE)  # the scripts and the API ride on the cookie
        WebDriverWait(browser, 30).until(lambda d: len(prediction_rows(d)) == 3)
        assert prediction_rows(browser)[0][0] == "1"
        assert not by_testid(browser, "error").is_displayed()
