"""Screenshots of `anyformer serve` for docs/serve.md, in headless system Chromium (Debian's chromium and
chromedriver; nothing is downloaded): the classifier page after uploading a picture, and the generator
page after sampling one class.

    python scripts/serve_screenshots.py CLASSIFIER_RUN PICTURE GENERATOR_RUN --out docs/screenshots
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select


def serve(run: str, port: int) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "anyformer", "serve", run, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(8)  # model load and uvicorn start
    return server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("classifier_run")
    p.add_argument("picture", help="an image file to upload to the classifier page")
    p.add_argument("generator_run")
    p.add_argument("--label", type=int, default=7, help="the class to sample on the generator page")
    p.add_argument("--out", default="docs/screenshots")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must not fetch a browser
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=980,520"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        server = serve(a.classifier_run, 8011)
        try:
            driver.get("http://127.0.0.1:8011/")
            driver.find_element(By.CSS_SELECTOR, '[data-testid="upload"]').send_keys(str(Path(a.picture).resolve()))
            time.sleep(4)
            driver.save_screenshot(str(out / "classifier_paper.png"))
            print(driver.find_element(By.CSS_SELECTOR, '[data-testid="prediction"]').text.replace("\n", " "))
        finally:
            server.terminate()
        server = serve(a.generator_run, 8012)
        try:
            driver.get("http://127.0.0.1:8012/")
            Select(driver.find_element(By.ID, "class")).select_by_index(a.label)
            for name, value in (("n", "8"), ("steps", "20"), ("cfg", "2"), ("seed", "0")):
                field = driver.find_element(By.ID, name)
                field.clear()
                field.send_keys(value)
            driver.find_element(By.ID, "sample").click()
            time.sleep(8)
            driver.save_screenshot(str(out / "generator.png"))
        finally:
            server.terminate()
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
