"""Checks the built site in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`) through
Selenium.

    .venv-docs/bin/python tools/docs/browser_check.py [--site build/site] [--out build/site-check]

Serves the site folder over HTTP on a free local port (a `http.server` thread in this process), then for the home
page and one API page (`sphere_tf.layers`):

* the page loaded and its title is the expected one;
* the navigation is there, with links (Material's primary nav, and the tabs);
* the search works: the search box is there, and a query typed into it lists results (Material's search runs in
  a web worker over `search/search_index.json`: the check waits for the result list);
* the browser logged no error (console level SEVERE: script errors, failed requests), and the server answered
  no request with an error;

and saves a screenshot of each page, `index.png` and `api.png`, in the output folder (CI artifacts), and one
with the search results open (`index-search.png`, `api-search.png`). Installs `chromium` and `chromium-driver`
with apt-get when missing (sudo when not root). Exit status 0 when every check passed, 1 with one line per
failure otherwise, 2 when the browser could not be set up.
"""

import argparse
import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEBIAN_PACKAGES = ("chromium", "chromium-driver")

# (screenshot name, site path, text the title must contain, search query, text the results must contain)
PAGES = (
    ("index", "", "sphere_tf", "ArcFace", None),
    ("api", "api/sphere_tf/layers/", "sphere_tf.layers", "SphereConv2D", "SphereConv2D"),
)
TIMEOUT_S = 30


def ensure_chromium():
    """Installs Debian's chromium and chromium-driver when either is missing."""
    if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER):
        return
    if shutil.which("apt-get") is None:
        raise RuntimeError(f"{CHROMIUM} or {CHROMEDRIVER} is missing and apt-get is not available to install "
                           f"{' and '.join(DEBIAN_PACKAGES)}")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    print(f"browser check: installing {' '.join(DEBIAN_PACKAGES)} with apt-get", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run([*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
                    *DEBIAN_PACKAGES], check=True, env=env, stdout=subprocess.DEVNULL)
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            raise RuntimeError(f"apt-get installed {' '.join(DEBIAN_PACKAGES)} but {path} is still missing")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site folder; records every request answered with an error instead of printing it."""

    errors = None  # set per server: a list shared with the check

    def log_message(self, format, *args):
        pass

    def log_request(self, code="-", size="-"):
        try:
            status = int(code)
        except (TypeError, ValueError):
            status = 0
        if status >= 400 and self.errors is not None:
            self.errors.append(f"HTTP {status} for {self.path}")


def serve(site_dir):
    """`(server, base_url, errors)`: the site served from a daemon thread on a free localhost port."""
    errors = []
    handler = type("Handler", (_QuietHandler,), {"errors": errors})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(handler, directory=site_dir))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/", errors


def start_browser():
    """Headless Chromium through /usr/bin/chromedriver, with the browser's console log recorded."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1024", "--no-first-run", "--disable-extensions",
                     "--disable-background-networking", "--disable-component-update"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def _wait(driver, condition, what, timeout=TIMEOUT_S):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition)
    except TimeoutException:
        raise AssertionError(f"{what} (waited {timeout} s)") from None


def check_page(driver, base_url, name, path, title_text, query, result_text, out_dir):
    """Runs the checks on one page; returns the list of failures (empty when it passed)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    failures = []
    url = base_url + path
    driver.get(url)
    try:
        _wait(driver, lambda d: d.execute_script("return document.readyState") == "complete",
              f"{url}: the page did not finish loading")
        title = driver.title
        if title_text not in title:
            failures.append(f"{url}: title {title!r} does not contain {title_text!r}")

        # Navigation: Material's primary sidebar nav, with links; the header tabs (navigation.tabs).
        nav_links = driver.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a.md-nav__link")
        if len(nav_links) < 3:
            failures.append(f"{url}: the navigation (nav.md-nav--primary) has {len(nav_links)} links")
        tabs = driver.find_elements(By.CSS_SELECTOR, "nav.md-tabs a.md-tabs__link")
        tab_names = [tab.get_attribute("textContent").strip() for tab in tabs]
        for expected in ("Home", "Guides", "API reference"):
            if expected not in tab_names:
                failures.append(f"{url}: no {expected!r} tab in the navigation tabs {tab_names}")
        if not driver.find_elements(By.CSS_SELECTOR, "article.md-content__inner h1"):
            failures.append(f"{url}: the page has no heading (article h1)")

        # Search: open the search box, type, wait for the worker's results.
        search_inputs = driver.find_elements(By.CSS_SELECTOR, "input.md-search__input")
        if not search_inputs:
            failures.append(f"{url}: no search input (input.md-search__input)")
        else:
            box = search_inputs[0]
            if not box.is_displayed():  # a narrow window: the header's search button opens the box
                driver.find_element(By.CSS_SELECTOR, "label.md-header__button[for='__search']").click()
                _wait(driver, lambda d: box.is_displayed(), f"{url}: the search input did not open")
            box.click()
            box.send_keys(query)
            items = _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "li.md-search-result__item"),
                          f"{url}: searching {query!r} listed no results")
            meta = driver.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text
            texts = " ".join(item.get_attribute("textContent") for item in items)
            if result_text and result_text not in texts:
                failures.append(f"{url}: the results of {query!r} do not mention {result_text!r}")
            print(f"browser check: {name}: search {query!r}: {meta or len(items)}", flush=True)
            driver.save_screenshot(os.path.join(out_dir, f"{name}-search.png"))
            box.send_keys(Keys.ESCAPE)
            time.sleep(0.3)
    except AssertionError as error:
        failures.append(str(error))
    except WebDriverException as error:
        failures.append(f"{url}: {type(error).__name__}: {error.msg}")
    driver.execute_script("window.scrollTo(0, 0)")
    shot = os.path.join(out_dir, f"{name}.png")
    if not driver.save_screenshot(shot):
        failures.append(f"{url}: could not save the screenshot {shot}")

    for entry in driver.get_log("browser"):
        if entry.get("level") == "SEVERE":
            failures.append(f"{url}: console error: {entry.get('message')}")
    return failures


def main(argv=None):
    """Runs the check; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default=os.path.join(ROOT, "build", "site"), help="the built site folder")
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "site-check"),
                        help="where the screenshots go")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.site, "index.html")):
        print(f"browser check: no built site at {args.site} (run scripts/build_docs.sh)", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    try:
        ensure_chromium()
    except (RuntimeError, subprocess.CalledProcessError) as error:
        print(f"browser check: cannot set up Chromium: {error}", file=sys.stderr)
        return 2

    server, base_url, server_errors = serve(args.site)
    failures = []
    try:
        try:
            driver = start_browser()
        except Exception as error:  # selenium's WebDriverException and friends, with the driver's message
            print(f"browser check: cannot start headless Chromium: {error}", file=sys.stderr)
            return 2
        try:
            for page in PAGES:
                failures += check_page(driver, base_url, *page, args.out)
        finally:
            driver.quit()
    finally:
        server.shutdown()
        server.server_close()
    failures += [f"server: {error}" for error in server_errors]

    if failures:
        print(f"browser check FAILED ({len(failures)}):", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    shots = ", ".join(os.path.relpath(os.path.join(args.out, f"{name}.png"), ROOT) for name, *_ in PAGES)
    print(f"browser check: passed ({len(PAGES)} pages: title, navigation, search, no console errors); "
          f"screenshots {shots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
