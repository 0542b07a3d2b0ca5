"""The status page at GET /, in a real browser (Debian's headless Chromium driven by selenium)
against the real binary and broker while a client consumes: the group, its partitions and a
live delivery rate; with a tokens file, the page asks for a token and shows only the groups
that token may see; a stalled partition in red with its reason. Saves build/status-page.png."""
import json
import pathlib
import shutil
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from conftest import BIN, ROOT, create_topic, produce, unique, wait_for
from grpc_support import write_tokens_json

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (PyPI) is not installed")
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
SHOT = ROOT / "build" / "status-page.png"


@pytest.fixture
def browser():
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/install-deps.sh)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,1000"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(options=opts, service=webdriver.ChromeService(CHROMEDRIVER))
    drv.set_page_load_timeout(30)
    yield drv
    drv.quit()


def call(sc, method, path, body=None, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(sc.base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


class Consumer(threading.Thread):
    """Fetches a few records at a time and acks them, until stopped: a client whose rate the
    page must see."""

    def __init__(self, sc, group, topic, token=None):
        super().__init__(daemon=True)
        self.sc, self.group, self.topic, self.token = sc, group, topic, token
        self.stop = threading.Event()
        self.acked = 0
        self.error = None

    def run(self):
        try:
            while not self.stop.is_set():
                st, b = call(self.sc, "GET", f"/v1/groups/{self.group}/records?topic={self.topic}"
                             "&max=20&wait_ms=500", token=self.token)
                assert st == 200, (st, b)
                ids = [r["ack_id"] for r in b["records"]]
                if ids:
                    st, b = call(self.sc, "POST", f"/v1/groups/{self.group}/acks",
                                 {"ack_ids": ids}, token=self.token)
                    assert st == 200, (st, b)
                    self.acked += len(ids)
                self.stop.wait(0.05)
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e


@pytest.fixture
def consumers():
    started = []

    def start(*args, **kw):
        c = Consumer(*args, **kw)
        c.start()
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop.set()
        c.join(30)


def section(drv, group):
    found = drv.find_elements(By.CSS_SELECTOR, f'section.group[data-group="{group}"]')
    return found[0] if found else None


def rate(drv, group):
    s = section(drv, group)
    if not s:
        return 0.0
    try:
        return float(s.find_element(By.CSS_SELECTOR, ".rate-delivered").text)
    except Exception:  # noqa: BLE001 (re-rendered while read)
        return 0.0


def chart_points(drv, group):
    try:
        d = section(drv, group).find_element(By.CSS_SELECTOR, "svg.chart path.d").get_attribute("d")
    except Exception:  # noqa: BLE001 (not drawn yet, or re-rendered while read)
        return 0
    return d.count("L") + 1


def test_page_shows_group_partitions_and_rate(bootstrap, sidecars, consumers, browser):
    topic, group = unique("tpage"), unique("page")
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 20000, partitions=3)
    sc = sidecars()
    cons = consumers(sc, group, topic)
    wait_for(lambda: cons.acked > 0 or cons.error, 60, what="the first acks")
    assert cons.error is None, cons.error

    # The page itself: self-contained, with a CSP that names no other origin.
    with urllib.request.urlopen(sc.base + "/", timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/html")
        csp = r.headers["Content-Security-Policy"]
        html = r.read().decode()
    assert "default-src 'none'" in csp and "'sha256-" in csp and "unsafe-inline" not in csp, csp
    for ref in ("<link", "src=", "@import", "url(", "<iframe"):
        assert ref not in html, f"the page loads something: {ref}"

    browser.get(sc.base + "/")
    wait_for(lambda: section(browser, group), 30, what="the group on the page")
    rows = wait_for(lambda: [r for r in section(browser, group).find_elements(
        By.CSS_SELECTOR, "tr.partition") if r.get_attribute("data-topic") == topic] or None, 30,
        what="the partitions on the page")
    assert sorted(int(r.get_attribute("data-partition")) for r in rows) == [0, 1, 2]
    wait_for(lambda: rate(browser, group) > 0, 30, what="a non-zero delivery rate")
    assert browser.find_element(By.ID, "version").text not in ("", "?")
    assert browser.find_element(By.ID, "kafka").text == "reachable"
    assert " of " in browser.find_element(By.ID, "memory").text
    # The chart: a line of a few refreshes' rates.
    wait_for(lambda: chart_points(browser, group) >= 4, 30, what="the rate chart's line")
    # The page's script ran under its CSP without a violation (the browser's own favicon
    # request is a 404).
    errors = [e for e in browser.get_log("browser")
              if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]]
    assert not errors, errors
    SHOT.parent.mkdir(exist_ok=True)
    browser.save_screenshot(str(SHOT))
    assert cons.error is None, cons.error


def test_page_asks_for_a_token_and_shows_only_its_groups(bootstrap, sidecars, consumers,
                                                         browser, tmp_path):
    topic = unique("tpagea")
    mine, other = unique("orders"), unique("billing")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5000)
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"token": "tok-orders", "groups": ["orders-*"], "consume": [topic]},
        {"token": "tok-all", "groups": ["*"], "consume": [topic]}])
    sc = sidecars(args=[f"--auth.tokens_file={tokens}"])
    for g in (mine, other):
        c = consumers(sc, g, topic, token="tok-all")
        wait_for(lambda: c.acked > 0 or c.error, 60, what=f"{g} consuming")
        assert c.error is None, c.error

    browser.get(sc.base + "/")  # served without a token
    form = wait_for(lambda: browser.find_element(By.ID, "auth").is_displayed() or None, 30,
                    what="the page asking for a token")
    assert form and not section(browser, mine)
    browser.find_element(By.ID, "token").send_keys("tok-wrong")
    browser.find_element(By.ID, "token-submit").click()
    wait_for(lambda: "refused" in browser.find_element(By.ID, "auth-msg").text, 30,
             what="a wrong token refused")
    browser.find_element(By.ID, "token").send_keys("tok-orders")
    browser.find_element(By.ID, "token-submit").click()
    wait_for(lambda: section(browser, mine), 30, what="the token's group")
    assert not browser.find_element(By.ID, "auth").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('ksidecar-token')") == "tok-orders"
    # Several refreshes later, still only its group.
    wait_for(lambda: rate(browser, mine) > 0, 30, what="its delivery rate")
    shown = [s.get_attribute("data-group") for s in
             browser.find_elements(By.CSS_SELECTOR, "section.group")]
    assert shown == [mine], shown


def test_stalled_partition_is_red_with_its_reason(bootstrap, sidecars, browser):
    topic, group = unique("tpages"), unique("stall")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 50)
    helptext = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=30).stdout
    args = ["--health.stall_ms=1000"] if "health.stall_ms" in helptext else []
    sc = sidecars(args=args)
    # One record leased and held, the rest never asked for: the commit point stays put
    # while the partition has lag.
    st, b = call(sc, "GET", f"/v1/groups/{group}/records?topic={topic}&max=1&wait_ms=20000"
                 "&deadline_ms=600000")
    assert st == 200 and len(b["records"]) == 1, (st, b)
    st, g = call(sc, "GET", f"/v1/groups/{group}")
    assert st == 200, (st, g)
    if not g["partitions"] or "stalled" not in g["partitions"][0]:
        pytest.skip("the group status has no `stalled` field yet (stall detection, branch "
                    "stall-detect, is not in this build)")

    def stalled():
        st, g = call(sc, "GET", f"/v1/groups/{group}")
        p = g["partitions"][0]
        return p if p.get("stalled") else None

    p = wait_for(stalled, 30, what="the partition flagged stalled")
    browser.get(sc.base + "/")
    row = wait_for(lambda: section(browser, group) and (section(browser, group).find_elements(
        By.CSS_SELECTOR, "tr.partition.stalled") or None), 30, what="a red partition row")[0]
    assert p["stall_reason"] in row.find_element(By.CSS_SELECTOR, "td.stall").text
    bg = row.find_element(By.CSS_SELECTOR, "td").value_of_css_property("background-color")
    r, gr, bl = [int(x) for x in bg[bg.index("(") + 1:].split(",")[:3]]
    assert r > gr + 20 and r > bl + 20, bg
    browser.save_screenshot(str(pathlib.Path(SHOT).with_name("status-page-stalled.png")))
