"""sluice serve's chat page in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by selenium through /usr/bin/chromedriver) loads `/` from a server on the demo
model, a message typed into the prompt is sent with Enter, the answer streams into its bubble until the
page marks it done (data-state="done"), the engine view fills with numbers from /metrics and the
heatmap from /experts, and the browser's console has no error. The screenshot is kept as
build/test-output/page.png (pytest's own tmp dirs are not kept). Skipped only when chromium,
chromedriver or selenium is missing; selenium-manager is never run (the machine is offline)."""
import os
import re

import pytest

from conftest import ROOT
from test_serve import DEMO, THINK, Server

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
OUT_DIR = os.path.join(ROOT, "build", "test-output")
# the elements the browser test drives and reads: checked in the served page even where it skips
IDS = ["prompt", "send", "stop", "log", "tps", "hit", "bpt", "gen", "heat", "heat-note"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("page"), "-m", DEMO)
    yield s
    assert s.stop() == 0, s.stderr()


def test_page_has_what_the_browser_test_uses(server):
    s, _, b = server.request("GET", "/")
    page = b.decode()
    assert s == 200
    for i in IDS:
        assert f'id="{i}"' in page, i
    assert "dataset.state" in page  # the answer's streaming / done marker


def browser():
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip(f"headless Chromium test: {CHROMIUM} or {CHROMEDRIVER} is missing "
                    "(Debian: apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("headless Chromium test: selenium is not installed (pip install selenium)")
    os.environ["SE_OFFLINE"] = "true"  # belt and braces: the explicit driver path already skips selenium-manager
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900", "--disable-dev-shm-usage",
              "--no-first-run", "--disable-extensions", "--disable-background-networking", "--force-color-profile=srgb"]:
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=o)


def test_page_in_chromium(server):
    d = browser()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(what, cond, timeout=60):
        return WebDriverWait(d, timeout, poll_frequency=0.05).until(lambda _: cond(), message=what)

    shot = os.path.join(OUT_DIR, "page.png")
    try:
        d.get(server.base + "/")
        assert d.title == "sluice"
        wait("the model list", lambda: d.find_element(By.ID, "model").get_attribute("value") == "demo", 20)
        d.find_element(By.ID, "temp").clear()
        d.find_element(By.ID, "temp").send_keys("0")
        d.find_element(By.ID, "max").clear()
        d.find_element(By.ID, "max").send_keys("48")
        prompt = d.find_element(By.ID, "prompt")
        prompt.send_keys("Read me Ruth chapter 2.")
        prompt.send_keys(Keys.ENTER)

        box = wait("the answer's bubble", lambda: d.find_elements(By.CSS_SELECTOR, "#log .msg.assistant"), 10)[0]
        user = d.find_element(By.CSS_SELECTOR, "#log .msg.user").text
        assert user == "Read me Ruth chapter 2."
        state = wait("the answer to finish", lambda: box.get_attribute("data-state") != "streaming" and
                     box.get_attribute("data-state"))
        parts = box.find_elements(By.XPATH, "./div")
        answer, meta = parts[1].text, parts[2].text
        errors = [e.text for e in box.find_elements(By.CSS_SELECTOR, ".err")]
        assert state == "done" and not errors, (state, errors)
        assert not d.find_element(By.ID, "stop").is_enabled() and d.find_element(By.ID, "send").is_enabled()
        # English-looking: letters, spaces and punctuation, mostly letters (the demo model writes King James prose)
        words = re.findall(r"[A-Za-z]+", answer)
        assert len(words) >= 5, answer
        assert sum(map(len, words)) >= 0.6 * len(answer.replace(" ", "").replace("\n", "")), answer
        # max_tokens 48 bounds the answer; the demo's thinking block (THINK tokens) comes besides it
        assert re.search(rf"\b{THINK + 48} tokens\b", meta) and "length" in meta, meta
        assert prompt.get_attribute("value") == ""

        # the engine view: /metrics polled every second, the heatmap from /experts every two
        wait("tokens generated in the engine view", lambda: (d.find_element(By.ID, "gen").text.isdigit() and
                                                             int(d.find_element(By.ID, "gen").text) >= 48), 10)
        tps, hit = d.find_element(By.ID, "tps").text, d.find_element(By.ID, "hit").text
        assert re.fullmatch(r"\d+\.\d", tps), tps
        assert re.fullmatch(r"\d+\.\d%", hit), hit
        assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB|GiB)", d.find_element(By.ID, "bpt").text)
        def heat_note():
            m = re.match(r"(\d+) layers × (\d+) experts; (\d+) expert requests", d.find_element(By.ID, "heat-note").text)
            return m if m and int(m.group(3)) > 0 else None
        note = wait("the heatmap with this answer's expert requests", heat_note, 10)
        heat = d.find_element(By.ID, "heat")
        assert heat.get_attribute("width") == note.group(2) and heat.get_attribute("height") == note.group(1)
        assert heat.size["width"] > 100 and heat.size["height"] >= 40, heat.size
        # the answer is on screen, not scrolled away or hidden
        assert box.is_displayed() and parts[1].is_displayed()

        severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, severe
    finally:
        os.makedirs(OUT_DIR, exist_ok=True)
        d.save_screenshot(shot)
        print(f"screenshot: {shot}")
        d.quit()
