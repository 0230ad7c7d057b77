"""Screenshots of `anyformer serve` for docs/serve.md: the classifier page with an uploaded ink-on-paper
digit and the generator page, in headless system Chromium. The run paths are arguments of this
development session; edit them for yours."""
import subprocess, sys, time, os
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

def serve(run, port):
    env = {**os.environ, "ANYFORMER_DATA": "/work/shared/data"}
    p = subprocess.Popen([sys.executable, "-m", "anyformer", "serve", run, "--port", str(port)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(8)
    return p

o = Options(); o.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=980,520"):
    o.add_argument(a)
os.environ["SE_OFFLINE"] = "true"
d = webdriver.Chrome(options=o, service=Service("/usr/bin/chromedriver"))
try:
    p = serve("/tmp/fresh11/main/runs/mnist", 8011)
    d.get("http://127.0.0.1:8011/")
    time.sleep(2)
    d.find_element(By.CSS_SELECTOR, '[data-testid="upload"]').send_keys("/tmp/paper11/paper-18-3.png")
    time.sleep(4)
    d.save_screenshot("/tmp/shots/classifier_paper.png")
    print(d.find_element(By.CSS_SELECTOR, '[data-testid="prediction"]').text)
    p.terminate()
    p = serve("/work/runs/mnist-gen", 8012)
    d.get("http://127.0.0.1:8012/")
    time.sleep(2)
    Select(d.find_element(By.ID, "class")).select_by_index(7)
    for k, v in (("n", "8"), ("steps", "20"), ("cfg", "2"), ("seed", "0")):
        e = d.find_element(By.ID, k); e.clear(); e.send_keys(v)
    d.find_element(By.ID, "sample").click()
    time.sleep(8)
    d.save_screenshot("/tmp/shots/generator.png")
    p.terminate()
finally:
    d.quit()
