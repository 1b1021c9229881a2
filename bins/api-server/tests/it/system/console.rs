//! The operator console (`/console/`) in a real browser: Debian's Chromium,
//! headless, driven over the DevTools protocol (chromiumoxide) against the
//! real api-server binary and the fake Compute Engine. The page must load
//! under its strict CSP with no console error, ask for nothing outside its
//! own origin, keep the key in sessionStorage only, and show what the API
//! says: the reservations, the grants, a reservation's timeline with one
//! bar per grant, and a grant's hours.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::log::{EventEntryAdded, LogEntryLevel, LogEntrySource};
use chromiumoxide::cdp::browser_protocol::network::EventRequestWillBeSent;
use chromiumoxide::cdp::browser_protocol::page::AddScriptToEvaluateOnNewDocumentParams;
use chromiumoxide::cdp::js_protocol::runtime::{
    ConsoleApiCalledType, EventConsoleApiCalled, EventExceptionThrown,
};
use chromiumoxide::handler::viewport::Viewport;
use chromiumoxide::page::{Page, ScreenshotParams};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::support::bodies::GrantBody;
use crate::support::builders::{GrantBuilder, InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, MIN};
use crate::support::db::contents;
use crate::support::fixtures::{
    Platform, end_grant, grant_of, id, list_grants, project, reservations, tenant_with_pool,
};
use crate::support::server::{ROOT, ROOT_TOKEN, Server};
use crate::support::worker;

const DAY: i64 = 24 * HOUR;

/// How long the page may take to show what a step waits for.
const PATIENCE: Duration = Duration::from_secs(20);

/// The browser: `CHROMIUM` if set, else Debian's `/usr/bin/chromium`
/// (`.ci/run` installs it when missing).
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(path);
    }
    for path in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(path).exists() {
            return PathBuf::from(path);
        }
    }
    panic!(
        "no Chromium: install Debian's package (`apt-get install chromium`, as .ci/run does) \
         or set CHROMIUM to the browser's path"
    );
}

/// What the page did that the tests check afterwards.
#[derive(Default)]
struct Seen {
    /// Every URL the page requested (Network.requestWillBeSent).
    requests: Vec<String>,
    /// Uncaught exceptions and `console.error` / `console.warn` calls.
    problems: Vec<String>,
    /// Browser log entries at level error: `(source, text)`.
    log_errors: Vec<(String, String)>,
}

/// A headless Chromium with one page, watched from its first request.
struct Chrome {
    browser: Browser,
    page: Page,
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<JoinHandle<()>>,
    _profile: tempfile::TempDir,
}

/// Records in the page, before any of its own script runs, every CSP
/// violation it meets (a DevTools script is not subject to the page's CSP).
const WATCH_CSP: &str = "window.__cspViolations = [];\
    document.addEventListener('securitypolicyviolation', \
    (e) => window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));";

impl Chrome {
    async fn launch() -> Chrome {
        let profile = tempfile::tempdir().expect("profile dir");
        let config = BrowserConfig::builder()
            .chrome_executable(chromium())
            .new_headless_mode()
            // CI runs as root, where Chromium's sandbox cannot start.
            .no_sandbox()
            .user_data_dir(profile.path())
            .viewport(Viewport {
                width: 1280,
                height: 900,
                ..Viewport::default()
            })
            .window_size(1280, 900)
            .launch_timeout(Duration::from_secs(60))
            .request_timeout(Duration::from_secs(30))
            // Nothing leaves the machine: every host but loopback goes to a
            // proxy that is not there, and resolves to nothing.
            .arg(("proxy-server", "http://127.0.0.1:9"))
            .arg(("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"))
            .args([
                "disable-gpu",
                "disable-component-update",
                "disable-domain-reliability",
                "no-pings",
                "no-default-browser-check",
            ])
            .build()
            .expect("browser config");
        let (browser, mut handler) = Browser::launch(config).await.expect("launch Chromium");
        let mut tasks = vec![tokio::spawn(async move {
            // Messages this protocol version does not know are skipped.
            while let Some(_event) = handler.next().await {}
        })];
        let page = browser.new_page("about:blank").await.expect("new page");
        page.execute(AddScriptToEvaluateOnNewDocumentParams::new(WATCH_CSP))
            .await
            .expect("watch CSP");
        let seen = Arc::new(Mutex::new(Seen::default()));

        let mut requests = page
            .event_listener::<EventRequestWillBeSent>()
            .await
            .expect("requests");
        let s = seen.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = requests.next().await {
                s.lock()
                    .expect("seen")
                    .requests
                    .push(ev.request.url.clone());
            }
        }));
        let mut exceptions = page
            .event_listener::<EventExceptionThrown>()
            .await
            .expect("exceptions");
        let s = seen.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = exceptions.next().await {
                let d = &ev.exception_details;
                let what = d.exception.as_ref().and_then(|e| e.description.clone());
                let text = format!("exception: {} {}", d.text, what.unwrap_or_default());
                s.lock().expect("seen").problems.push(text);
            }
        }));
        let mut console = page
            .event_listener::<EventConsoleApiCalled>()
            .await
            .expect("console");
        let s = seen.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = console.next().await {
                if matches!(
                    ev.r#type,
                    ConsoleApiCalledType::Error | ConsoleApiCalledType::Warning
                ) {
                    let args: Vec<String> = ev
                        .args
                        .iter()
                        .map(|a| match (&a.value, &a.description) {
                            (Some(v), _) => v.to_string(),
                            (None, Some(d)) => d.clone(),
                            (None, None) => String::new(),
                        })
                        .collect();
                    let text = format!("console.{:?}: {}", ev.r#type, args.join(" "));
                    s.lock().expect("seen").problems.push(text);
                }
            }
        }));
        let mut log = page.event_listener::<EventEntryAdded>().await.expect("log");
        let s = seen.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = log.next().await {
                if ev.entry.level == LogEntryLevel::Error {
                    let source = format!("{:?}", ev.entry.source);
                    let text = format!(
                        "{} {}",
                        ev.entry.text,
                        ev.entry.url.clone().unwrap_or_default()
                    );
                    s.lock().expect("seen").log_errors.push((source, text));
                }
            }
        }));
        Chrome {
            browser,
            page,
            seen,
            tasks,
            _profile: profile,
        }
    }

    async fn goto(&self, url: &str) {
        self.page.goto(url).await.expect("navigate");
    }

    /// Evaluates `js` in the page and returns its value.
    async fn eval<T: DeserializeOwned>(&self, js: &str) -> T {
        self.page
            .evaluate(js)
            .await
            .unwrap_or_else(|e| panic!("evaluate {js}: {e}"))
            .into_value()
            .unwrap_or_else(|e| panic!("value of {js}: {e}"))
    }

    /// Waits until `js` is true in the page; fails with what the page's
    /// error box says when it is not within [`PATIENCE`].
    async fn wait_for(&self, js: &str, what: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if self.eval::<bool>(&format!("!!({js})")).await {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                let shown: String = self.eval(ERROR_TEXT).await;
                panic!("the page did not show {what} within {PATIENCE:?} (error box: {shown:?})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Replaces the text of the input `testid` by typing `text` into it.
    async fn type_into(&self, testid: &str, text: &str) {
        let sel = format!("[data-testid={testid}]");
        self.eval::<Value>(&format!("document.querySelector('{sel}').value = ''"))
            .await;
        let input = self.page.find_element(sel).await.expect(testid);
        input.click().await.expect("focus");
        input.type_str(text).await.expect("type");
    }

    /// Sets the value of the input `testid` as a script would (a
    /// `datetime-local` field takes no typed text reliably).
    async fn set_value(&self, testid: &str, value: &str) {
        let js = format!(
            "(() => {{ const e = document.querySelector('[data-testid={testid}]'); \
             e.value = {v}; e.dispatchEvent(new Event('input', {{ bubbles: true }})); \
             return e.value; }})()",
            v = json!(value)
        );
        assert_eq!(self.eval::<String>(&js).await, value, "{testid}");
    }

    /// The text of the first element matching `selector` ("" if none).
    async fn text(&self, selector: &str) -> String {
        self.eval(&format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.textContent : ''; }})()",
            json!(selector)
        ))
        .await
    }

    /// Clicks the first element matching `selector` with the mouse.
    async fn click(&self, selector: &str) {
        let el = self
            .page
            .find_element(selector)
            .await
            .unwrap_or_else(|e| panic!("find {selector}: {e}"));
        el.click()
            .await
            .unwrap_or_else(|e| panic!("click {selector}: {e}"));
    }

    /// Signs in with `key` acting in `tenant`.
    /// Opens the timeline of the reservation row `row` (a selector).
    async fn open_timeline(&self, row: &str) {
        self.click(&format!("{row} [data-testid=open-timeline]"))
            .await;
        self.wait_for(
            "document.querySelector('[data-testid=timeline]')",
            "the timeline",
        )
        .await;
    }

    async fn sign_in(&self, tenant: &str, key: &str) {
        self.wait_for(VISIBLE_FORM, "the key form").await;
        self.type_into("tenant-input", tenant).await;
        self.type_into("key-input", key).await;
        self.click("[data-testid=key-submit]").await;
    }

    /// `(grantId, tenantId)` of every element matching `selector`, sorted;
    /// an attribute that is absent reads as "".
    async fn ids_of(&self, selector: &str) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .eval(&format!(
                "[...document.querySelectorAll('{selector}')].map((e) => \
                 [e.getAttribute('data-grant-id') || '', e.getAttribute('data-tenant-id') || ''])"
            ))
            .await;
        v.sort();
        v
    }

    /// Checks what the page did so far: no uncaught exception, no console
    /// error or warning, no CSP violation, no browser error but the network
    /// lines of the `expected_statuses` the test provoked, and no request
    /// outside `origin` but `data:` URLs (nor any carrying `key` in its URL).
    async fn assert_clean(&self, origin: &str, secrets: &[&str], expected_statuses: &[u16]) {
        let violations: Vec<String> = self.eval("window.__cspViolations").await;
        assert!(violations.is_empty(), "CSP violations: {violations:?}");
        let seen = self.seen.lock().expect("seen");
        assert!(
            seen.problems.is_empty(),
            "page problems: {:?}",
            seen.problems
        );
        let unexpected: Vec<&(String, String)> = seen
            .log_errors
            .iter()
            .filter(|(source, text)| {
                let network = *source == format!("{:?}", LogEntrySource::Network);
                let expected = expected_statuses
                    .iter()
                    .any(|s| text.contains(&format!("status of {s}")));
                !(network && expected)
            })
            .collect();
        assert!(unexpected.is_empty(), "browser errors: {unexpected:?}");
        assert!(!seen.requests.is_empty(), "no request was seen");
        let prefix = format!("{origin}/");
        for url in &seen.requests {
            // A `data:` URL carries its content and reaches no server: the
            // calendar icon Chromium draws in a `datetime-local` field is one.
            assert!(
                url.starts_with(&prefix) || url.starts_with("data:"),
                "a request outside {origin}: {url}"
            );
            for secret in secrets {
                assert!(!url.contains(secret), "a URL carries the key: {url}");
            }
        }
    }

    /// Writes a full-page PNG of the page to `path`.
    async fn screenshot(&self, path: &Path) {
        self.eval::<Value>("window.scrollTo(0, 0)").await;
        let png = self
            .page
            .screenshot(ScreenshotParams::builder().full_page(true).build())
            .await
            .expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("target dir");
        std::fs::write(path, &png).expect("write screenshot");
    }

    async fn close(mut self) {
        self.browser.close().await.expect("close Chromium");
        let _ = self.browser.wait().await;
        for t in self.tasks {
            t.abort();
        }
    }
}

const VISIBLE_FORM: &str = "!document.querySelector('[data-testid=key-form]').hidden";
const ERROR_TEXT: &str = "(() => { \
     const e = document.querySelector('[data-testid=error-message]'); \
     return e && !e.hidden ? e.textContent : ''; })()";

/// The world the console shows: a reservation of 8 slots bound to a pool,
/// tenants `acme` (3 slots now, one running instance) and `globex` (2 slots
/// from in two days, and a cancelled grant), with the manual clock 3.5 hours
/// past the first grant's start so it has hours to show.
struct World {
    p: Platform,
    globex_token: String,
}

/// The next whole hour after both the server's clock and the wall clock, so
/// the page's datetime fields and "now" line read naturally.
async fn next_hour(s: &Server) -> i64 {
    let wall = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("time")
            .as_millis(),
    )
    .expect("ms");
    (s.now().await.max(wall) / HOUR + 1) * HOUR
}

async fn world(s: &Server) -> World {
    let start = next_hour(s).await;
    s.set_clock(start).await;
    let p = PlatformBuilder::new().slots(8).build(s).await;
    let globex_token = tenant_with_pool(s, "globex", &p.pool).await;
    GrantBuilder::new(&p)
        .slots(3)
        .term(start, start + 10 * DAY)
        .create(s)
        .await;
    GrantBuilder::new(&p)
        .grantee("globex")
        .slots(2)
        .term(start + 2 * DAY, start + 20 * DAY)
        .create(s)
        .await;
    let cancelled = GrantBuilder::new(&p)
        .grantee("globex")
        .term(start + 25 * DAY, start + 28 * DAY)
        .create(s)
        .await;
    end_grant(s, &p.account, &cancelled).await.ok();
    InstanceBuilder::new(&p).create(s).await;
    s.set_clock(start + 3 * HOUR + 30 * MIN).await;
    World { p, globex_token }
}

/// `(grantId, tenantId)` of `grants`, sorted.
fn pairs(grants: &[Value]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = grants
        .iter()
        .map(|g| {
            (
                g["grantId"].as_str().expect("grantId").to_owned(),
                g["tenantId"].as_str().expect("tenantId").to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Every grant as root sees it (`reservationGrants.list {all: true}`).
/// Every grant on `reservation`, as root lists them.
async fn grants_on(s: &Server, reservation: &str) -> Vec<Value> {
    all_grants(s)
        .await
        .into_iter()
        .filter(|g| g["reservationId"] == reservation)
        .collect()
}

async fn all_grants(s: &Server) -> Vec<Value> {
    let v = s
        .root("reservationGrants/list", json!({ "all": true }))
        .await
        .ok();
    v["items"].as_array().expect("items").clone()
}

/// A 6-decimal hours string in micro-hours.
fn micros(text: &str) -> i64 {
    let (whole, frac) = text.split_once('.').expect("6 decimals");
    assert_eq!(frac.len(), 6, "{text}");
    whole.parse::<i64>().expect("whole") * 1_000_000 + frac.parse::<i64>().expect("frac")
}

fn fmt_micros(m: i64) -> String {
    format!("{}.{:06}", m / 1_000_000, m % 1_000_000)
}

// ------------------------------------------------------------- the assets

#[tokio::test(flavor = "multi_thread")]
async fn the_console_is_served_from_the_binary_under_a_strict_policy() {
    let s = Server::start().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let get = |path: &str| client.get(format!("{}{path}", s.url)).send();
    let csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
               connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
    for (path, ty, needle) in [
        (
            "/console/",
            "text/html; charset=utf-8",
            "<script src=\"console.js\"",
        ),
        (
            "/console/index.html",
            "text/html; charset=utf-8",
            "data-testid=\"key-form\"",
        ),
        (
            "/console/console.js",
            "text/javascript; charset=utf-8",
            "sessionStorage",
        ),
        (
            "/console/console.css",
            "text/css; charset=utf-8",
            "svg .bar",
        ),
        ("/console/favicon.svg", "image/svg+xml", "<svg"),
    ] {
        let resp = get(path).await.expect(path);
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers().clone();
        assert_eq!(h["content-type"], ty, "{path}");
        assert_eq!(h["cache-control"], "no-cache", "{path}");
        assert_eq!(h["content-security-policy"], csp, "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
        assert!(h.contains_key("x-request-id"), "{path}");
        let body = resp.text().await.expect("body");
        assert!(body.contains(needle), "{path} lacks {needle:?}");
    }
    // The page loads its script and style by relative URL, nothing inline.
    let html = get("/console/")
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(html.contains("<link rel=\"stylesheet\" href=\"console.css\">"));
    assert!(!html.contains("<style") && !html.contains("style=") && !html.contains("onclick"));

    // `/console` sends the browser to `/console/`, so those URLs resolve.
    let resp = get("/console").await.expect("/console");
    assert_eq!(resp.status(), 308);
    assert_eq!(resp.headers()["location"], "/console/");
    assert_eq!(resp.headers()["content-security-policy"], csp);

    let head = client
        .head(format!("{}/console/", s.url))
        .send()
        .await
        .expect("HEAD");
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-type"], "text/html; charset=utf-8");

    let post = s.raw(None, "POST", "/console/", Some("{}".into())).await;
    post.err(405, "METHOD_NOT_ALLOWED");
    let missing = s.raw(None, "GET", "/console/app.js", None).await;
    missing.err(404, "NOT_FOUND");
    // The API beside it is unchanged.
    let (status, _) = s.get_text("/healthz").await;
    assert_eq!(status, 200);
}

// --------------------------------------------------------- in the browser

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_signs_in_sees_reservations_and_grants_and_a_tenant_sees_its_own() {
    let s = Server::start().await;
    let w = world(&s).await;
    let page_url = format!("{}/console/", s.url);
    let chrome = Chrome::launch().await;

    chrome.goto(&page_url).await;
    chrome.wait_for(VISIBLE_FORM, "the key form").await;
    assert_eq!(
        chrome.eval::<String>("document.title").await,
        "Compute console"
    );
    // Give the icon and any late error a moment, then nothing is wrong yet.
    tokio::time::sleep(Duration::from_millis(300)).await;
    chrome.assert_clean(&s.url, &[], &[]).await;

    // A wrong key: the error envelope's code, said plainly; nothing kept.
    let wrong = "bck_thisisnotakeyofthisserver00000000000000000";
    chrome.sign_in(ROOT, wrong).await;
    chrome
        .wait_for(
            &format!("{ERROR_TEXT}.includes('That key was not accepted (UNAUTHENTICATED)')"),
            "the wrong-key message",
        )
        .await;
    assert_eq!(chrome.eval::<i64>("sessionStorage.length").await, 0);
    assert!(chrome.eval::<bool>(VISIBLE_FORM).await, "the form stays");

    // Root's key: pools, the reservation, every grant.
    chrome.sign_in(ROOT, ROOT_TOKEN).await;
    let row = format!(
        "[data-testid=reservation-row][data-reservation-id='{}'][data-account-id='{}']",
        w.p.reservation, w.p.account
    );
    chrome
        .wait_for(
            &format!("document.querySelector(\"{row}\")"),
            "the reservation",
        )
        .await;
    assert_eq!(
        chrome
            .eval::<i64>("document.querySelectorAll('[data-testid=reservation-row]').length")
            .await,
        1
    );
    let text: String = chrome
        .eval(&format!("document.querySelector(\"{row}\").textContent"))
        .await;
    for part in ["res-a", "us-central1-a", "n2-standard-4", "8", "ready"] {
        assert!(text.contains(part), "row {text:?} lacks {part:?}");
    }
    let pool_row = format!("[data-testid=pool-row][data-pool-id='{}']", w.p.pool);
    assert!(
        chrome
            .eval::<bool>(&format!("!!document.querySelector(\"{pool_row}\")"))
            .await
    );
    chrome
        .wait_for(
            "document.querySelectorAll('[data-testid=grant-row]').length === 3",
            "root's three grants",
        )
        .await;
    let listed = pairs(&all_grants(&s).await);
    assert_eq!(listed.len(), 3);
    assert_eq!(chrome.ids_of("[data-testid=grant-row]").await, listed);
    assert!(
        !chrome.eval::<bool>(VISIBLE_FORM).await,
        "the form is put away"
    );

    // The key lives in this tab's sessionStorage only.
    assert_eq!(
        chrome
            .eval::<String>("sessionStorage.getItem('console.apiKey')")
            .await,
        ROOT_TOKEN
    );
    assert_eq!(chrome.eval::<i64>("localStorage.length").await, 0);
    assert_eq!(chrome.eval::<String>("document.cookie").await, "");
    assert!(
        !chrome
            .eval::<String>("location.href")
            .await
            .contains(ROOT_TOKEN)
    );
    assert!(chrome.page.get_cookies().await.expect("cookies").is_empty());

    // Forgetting it clears the tab and asks again.
    chrome.click("[data-testid=forget-key]").await;
    chrome.wait_for(VISIBLE_FORM, "the key form again").await;
    assert_eq!(chrome.eval::<i64>("sessionStorage.length").await, 0);
    assert_eq!(
        chrome
            .eval::<i64>("document.querySelectorAll('[data-testid=grant-row]').length")
            .await,
        0
    );

    // A tenant's key sees its own grants only.
    chrome.sign_in("globex", &w.globex_token).await;
    let own = list_grants(&s, &w.globex_token, "globex", None).await.ok();
    let own = pairs(own["items"].as_array().expect("items"));
    assert_eq!(own.len(), 2);
    chrome
        .wait_for(
            "document.querySelectorAll('[data-testid=grant-row]').length === 2",
            "globex's two grants",
        )
        .await;
    assert_eq!(chrome.ids_of("[data-testid=grant-row]").await, own);
    assert_eq!(
        chrome
            .eval::<i64>("document.querySelectorAll('[data-testid=reservation-row]').length")
            .await,
        0,
        "a tenant is not shown root's reservations"
    );

    // The wrong key's 401 and the tenant's 403 on tenants.list (how the page
    // tells root from a tenant) are the only failed requests.
    chrome
        .assert_clean(&s.url, &[wrong, ROOT_TOKEN, &w.globex_token], &[401, 403])
        .await;
    chrome.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_draws_a_reservation_timeline_and_reads_a_grants_hours() {
    let s = Server::start().await;
    let w = world(&s).await;
    // The provider holds 2 of the reservation's 8 slots from now on, while
    // acme's grant commits 3: 45 minutes later acme is owed 0.75 slot-hour.
    w.p.gce.put("res-a", 2, 0, "READY").await;
    worker::once(&s, &["vps.reservations"]).await;
    s.set_clock(s.now().await + 45 * MIN).await;
    let chrome = Chrome::launch().await;
    chrome.goto(&format!("{}/console/", s.url)).await;
    chrome.sign_in(ROOT, ROOT_TOKEN).await;
    let row = format!(
        "[data-testid=reservation-row][data-reservation-id='{}']",
        w.p.reservation
    );
    chrome
        .wait_for(
            &format!("document.querySelector(\"{row}\")"),
            "the reservation",
        )
        .await;

    // The slot accounts of contract 3.10, as listReservations gives them.
    let listed = reservations(&s, &w.p.account).await;
    assert_eq!(listed.len(), 1);
    for field in [
        "grantedSlots",
        "heldInGrants",
        "ordinaryInUse",
        "ordinaryFree",
        "physicalInUse",
    ] {
        let want = listed[0][field]
            .as_i64()
            .unwrap_or_else(|| panic!("{field} in {}", listed[0]));
        let shown: String = chrome
            .eval(&format!(
                "document.querySelector(\"{row} [data-field={field}]\").textContent"
            ))
            .await;
        assert_eq!(shown, want.to_string(), "{field}");
    }

    // The timeline: one bar per grant on the reservation, named by tenant.
    chrome.open_timeline(&row).await;
    let on_reservation = grants_on(&s, &w.p.reservation).await;
    assert_eq!(on_reservation.len(), 3);
    assert_eq!(
        chrome.ids_of("[data-testid=grant-bar]").await,
        pairs(&on_reservation)
    );
    let cancelled = on_reservation
        .iter()
        .find(|g| g["state"] == "cancelled")
        .expect("the cancelled grant");
    let state: String = chrome
        .eval(&format!(
            "document.querySelector('[data-testid=grant-bar][data-grant-id=\"{}\"]')\
             .getAttribute('data-state')",
            cancelled["grantId"].as_str().expect("id")
        ))
        .await;
    assert_eq!(state, "cancelled");
    for part in ["now-line", "total-line", "committed", "in-grants", "in-use"] {
        let there: bool = chrome
            .eval(&format!(
                "!!document.querySelector('[data-testid=timeline] [data-testid={part}]')"
            ))
            .await;
        assert!(there, "the timeline lacks {part}");
    }

    // The reservation's instances with their states, as instances.list
    // gives them (a ledger instance has no VM).
    let listed = s
        .root(
            "instances/list",
            json!({ "all": true, "reservationId": w.p.reservation }),
        )
        .await
        .ok();
    let mut want: Vec<(String, String, String)> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|i| i["state"] != "deleted")
        .map(|i| {
            let field = |k: &str| i[k].as_str().expect(k).to_owned();
            (field("instanceId"), field("state"), "—".to_owned())
        })
        .collect();
    want.sort();
    assert!(!want.is_empty(), "{listed}");
    chrome
        .wait_for(
            "document.querySelector('[data-testid=instances-table]')",
            "the reservation's instances",
        )
        .await;
    let mut shown: Vec<(String, String, String)> = chrome
        .eval(
            "[...document.querySelectorAll('[data-testid=instance-row]')].map((e) => \
             [e.getAttribute('data-instance-id'), e.getAttribute('data-state'), \
              e.querySelector('[data-field=vm]').textContent])",
        )
        .await;
    shown.sort();
    assert_eq!(shown, want);

    // Clicking acme's bar shows that grant's hours, as the API counts them.
    let acme = on_reservation
        .iter()
        .find(|g| g["tenantId"] == "acme")
        .expect("acme's grant");
    let acme_id = acme["grantId"].as_str().expect("id");
    chrome
        .click(&format!(
            "[data-testid=grant-bar][data-grant-id='{acme_id}']"
        ))
        .await;
    chrome
        .wait_for(
            "document.querySelector('table[data-testid=usage-table]')",
            "the usage table",
        )
        .await;
    let usage = s
        .root("reservationGrants/usage", json!({ "grantId": acme_id }))
        .await
        .ok();
    let hours = usage["items"].as_array().expect("items");
    assert!(!hours.is_empty(), "{usage}");
    assert_eq!(
        chrome
            .eval::<usize>("document.querySelectorAll('[data-testid=usage-row]').length")
            .await,
        hours.len()
    );
    for (testid, field) in [
        ("usage-total-slot-hours", "slotHours"),
        ("usage-total-held-hours", "heldHours"),
        ("usage-total-usage-hours", "usageHours"),
        ("usage-total-deficit-hours", "deficitHours"),
        ("usage-total-lent-hours", "lentHours"),
    ] {
        let sum: i64 = hours
            .iter()
            .map(|i| micros(i[field].as_str().expect(field)))
            .sum();
        let shown: String = chrome
            .eval(&format!(
                "document.querySelector('[data-testid={testid}]').textContent"
            ))
            .await;
        assert_eq!(shown, fmt_micros(sum), "{field}");
    }
    let credited: String = chrome
        .eval("document.querySelector('[data-testid=usage-total-deficit-hours]').textContent")
        .await;
    assert_eq!(credited, "0.750000");
    let bars: usize = chrome
        .eval("document.querySelectorAll('[data-testid=usage-credit]').length")
        .await;
    assert_eq!(bars, 2, "the credit drawn in the two hours it falls in");
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshot.png");
    chrome.screenshot(&target).await;

    // A grantee's view of the same reservation: its own bar by name, the
    // others' bars anonymous.
    chrome.click("[data-testid=forget-key]").await;
    chrome.sign_in("acme", &w.p.tenant_token).await;
    chrome
        .wait_for(
            "document.querySelector('[data-testid=grant-row] [data-testid=grant-timeline]')",
            "acme's grant",
        )
        .await;
    chrome
        .click("[data-testid=grant-row] [data-testid=grant-timeline]")
        .await;
    chrome
        .wait_for(
            "document.querySelector('[data-testid=grant-bar][data-tenant-id=acme]')",
            "acme's bar",
        )
        .await;
    let bars = chrome.ids_of("[data-testid=grant-bar]").await;
    let (named, anonymous): (Vec<_>, Vec<_>) = bars.iter().partition(|(g, _)| !g.is_empty());
    assert_eq!(named, vec![&(acme_id.to_owned(), "acme".to_owned())]);
    // globex's live grant is there without its id or tenant; whether its
    // cancelled one is drawn too is the timeline's choice (it commits nothing).
    assert!(
        (1..=2).contains(&anonymous.len()) && anonymous.iter().all(|(_, t)| t.is_empty()),
        "{bars:?}"
    );
    chrome
        .click(&format!(
            "[data-testid=grant-bar][data-grant-id='{acme_id}']"
        ))
        .await;
    chrome
        .wait_for(
            "document.querySelectorAll('[data-testid=usage-row]').length > 0",
            "acme's hours",
        )
        .await;

    chrome
        .assert_clean(&s.url, &[ROOT_TOKEN, &w.p.tenant_token], &[403])
        .await;
    chrome.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_world_reads_in_the_console() {
    // The world `just run` shows, seeded the same way, on the real server.
    let s = Server::start().await;
    let gce = crate::support::gce::Gce::start().await;
    let summary = crate::support::demo::seed(&s, &gce).await;
    let account = summary["accountId"].as_str().expect("accountId").to_owned();
    let demo_a = summary["reservations"][0]
        .as_str()
        .expect("demo-a")
        .to_owned();

    let chrome = Chrome::launch().await;
    chrome.goto(&format!("{}/console/", s.url)).await;
    chrome.sign_in(ROOT, ROOT_TOKEN).await;
    let row = format!("[data-testid=reservation-row][data-reservation-id='{demo_a}']");
    chrome
        .wait_for(&format!("document.querySelector(\"{row}\")"), "demo-a")
        .await;
    assert_eq!(reservations(&s, &account).await.len(), 2);
    chrome.open_timeline(&row).await;
    // demo-a carries acme's three grants (ended, active, renewal) and
    // globex's one starting tomorrow: one bar each, named by tenant.
    let on_a = grants_on(&s, &demo_a).await;
    assert_eq!(on_a.len(), 4);
    assert_eq!(chrome.ids_of("[data-testid=grant-bar]").await, pairs(&on_a));

    // acme's active grant shows the hours the worker metered from the
    // played history.
    let active = on_a
        .iter()
        .find(|g| g["tenantId"] == "acme" && g["state"] == "active")
        .expect("acme's active grant");
    let id = active["grantId"].as_str().expect("id");
    chrome
        .click(&format!("[data-testid=grant-bar][data-grant-id='{id}']"))
        .await;
    chrome
        .wait_for(
            "document.querySelectorAll('[data-testid=usage-row]').length > 0",
            "the active grant's hours",
        )
        .await;
    let held: String = chrome
        .eval("document.querySelector('[data-testid=usage-total-held-hours]').textContent")
        .await;
    assert!(
        micros(&held) > 0,
        "held hours of the demo's active grant: {held}"
    );

    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-demo.png");
    chrome.screenshot(&target).await;

    // demo-m, the managed pool's reservation: its instances with the VMs
    // the worker made for them and the status the provider reports.
    let managed = "[data-testid=reservation-row][data-reservation-id$='/demo-m']";
    chrome.open_timeline(managed).await;
    chrome
        .wait_for(
            "[...document.querySelectorAll('[data-testid=instances-table] td')]\
             .some((td) => td.textContent === 'RUNNING')",
            "a managed instance's VM running",
        )
        .await;
    let vms: Vec<String> = chrome
        .eval(
            "[...document.querySelectorAll('[data-testid=instances-table] \
             td[data-field=vm]')].map((td) => td.textContent)",
        )
        .await;
    assert!(
        vms.iter().any(|v| v.starts_with("bc-")),
        "the managed instances show their VMs: {vms:?}"
    );
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-managed.png");
    chrome.screenshot(&target).await;
    chrome.assert_clean(&s.url, &[ROOT_TOKEN], &[]).await;
    chrome.close().await;
}

// ------------------------------------------------- notices and the preview

/// `ms` in UTC as `(year, month, day, hour, minute)` (days to civil date,
/// after H. Hinnant).
fn civil(ms: i64) -> (i64, i64, i64, i64, i64) {
    let (days, rem) = (ms.div_euclid(DAY), ms.rem_euclid(DAY));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        yoe + era * 400 + i64::from(m <= 2),
        m,
        d,
        rem / HOUR,
        rem % HOUR / MIN,
    )
}

/// A time as the page writes it: `2026-12-01 19:30Z`.
fn fmt_time(ms: i64) -> String {
    let (y, m, d, hh, mm) = civil(ms);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}Z")
}

/// A time as a `datetime-local` field holds it, read as UTC: `2026-12-01T19:30`.
fn input_time(ms: i64) -> String {
    let (y, m, d, hh, mm) = civil(ms);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}")
}

/// A 6-decimal ratio as an exact percentage: `"0.104167"` is `"10.4167 %"`,
/// `"0.500000"` is `"50 %"`.
fn percent(ratio: &str) -> String {
    let m = micros(ratio);
    let frac = format!("{:04}", m % 10_000);
    match frac.trim_end_matches('0') {
        "" => format!("{} %", m / 10_000),
        f => format!("{}.{f} %", m / 10_000),
    }
}

#[test]
fn the_tests_write_times_and_percentages_as_the_page_does() {
    assert_eq!(fmt_time(0), "1970-01-01 00:00Z");
    assert_eq!(
        fmt_time(1_893_456_000_000 + 19 * HOUR + 30 * MIN),
        "2030-01-01 19:30Z"
    );
    assert_eq!(fmt_time(951_782_400_000), "2000-02-29 00:00Z");
    assert_eq!(input_time(1_709_251_199_000), "2024-02-29T23:59");
    assert_eq!(percent("0.104167"), "10.4167 %");
    assert_eq!(percent("0.500000"), "50 %");
    assert_eq!(percent("0.000000"), "0 %");
    assert_eq!(percent("1.000000"), "100 %");
}

/// A world with grant notices due: acme's 2-slot grant of 26 hours, renewed
/// by a 1-slot grant from its end, with one instance held in it from hour
/// 20, and the clock at hour 25.5. There its 1d and 1h expiry notices are
/// due (the 7d one would fall before its start), and its last 24 whole
/// hours held 5 instance-hours of 48 committed, under a fifth: underused.
/// The worker's `vps.grants` pass has sent them.
struct Noticed {
    p: Platform,
    grant: String,
    renewal: String,
}

async fn noticed_world(s: &Server) -> Noticed {
    let start = next_hour(s).await;
    s.set_clock(start).await;
    let p = PlatformBuilder::new().slots(8).build(s).await;
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(start, start + 26 * HOUR)
        .create(s)
        .await;
    let renewal = GrantBuilder::new(&p)
        .term(start + 26 * HOUR, start + 50 * HOUR)
        .create(s)
        .await;
    s.set_clock(start + 20 * HOUR).await;
    let held = InstanceBuilder::new(&p).create(s).await;
    assert_eq!(grant_of(&held).as_deref(), Some(g.as_str()), "{held}");
    s.set_clock(start + 25 * HOUR + 30 * MIN).await;
    worker::once(s, &["vps.grants"]).await;
    Noticed {
        p,
        grant: g,
        renewal,
    }
}

/// The notices of `grant` in the log of `tenant` (read with `token`).
async fn notices_of(s: &Server, token: &str, tenant: &str, grant: &str) -> Vec<Value> {
    let v = s
        .call(
            token,
            "events/list",
            json!({
                "tenantId": tenant,
                "limit": 1000,
                "types": ["reservation-grant.expiring", "reservation-grant.underused"],
            }),
        )
        .await
        .ok();
    assert_eq!(v["hasMore"], false, "{v}");
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["data"]["grantId"] == grant)
        .cloned()
        .collect()
}

/// Opens `grant` from the grant list and checks that the page shows each of
/// `notices` (events from the signed-in tenant's log) with its figures.
async fn assert_notices_shown(chrome: &Chrome, grant: &str, notices: &[Value]) {
    chrome
        .click(&format!("[data-testid=grant-row][data-grant-id='{grant}']"))
        .await;
    chrome
        .wait_for(
            &format!(
                "document.querySelectorAll('[data-testid=notice]').length === {} && \
                 document.getElementById('usage-title').textContent === '{grant}'",
                notices.len()
            ),
            "the grant's notices",
        )
        .await;
    // Newest first: the log's order reversed.
    let order: Vec<String> = chrome
        .eval(
            "[...document.querySelectorAll('[data-testid=notice]')]\
             .map((e) => e.getAttribute('data-event-id'))",
        )
        .await;
    let mut want: Vec<String> = notices
        .iter()
        .map(|e| e["eventId"].as_str().expect("eventId").to_owned())
        .collect();
    want.reverse();
    assert_eq!(order, want);
    for ev in notices {
        let card = format!(
            "[data-testid=notice][data-event-id='{}']",
            ev["eventId"].as_str().expect("eventId")
        );
        let field = |name: &str| format!("{card} [data-field={name}]");
        let d = &ev["data"];
        let ty = ev["type"].as_str().expect("type");
        let slots = d["slots"].as_i64().expect("slots");
        let suggested = d["suggestedSlots"].as_i64().expect("suggestedSlots");
        let utilisation = d["utilisation"].as_str().expect("utilisation");
        let at = ev["occurredAt"].as_i64().expect("occurredAt");
        let mut want = vec![
            ("when", fmt_time(at)),
            ("utilisation", percent(utilisation)),
        ];
        if ty == "reservation-grant.expiring" {
            want.extend([
                ("kind", "Expiring".to_owned()),
                (
                    "notice",
                    format!("{} before its end", d["notice"].as_str().expect("notice")),
                ),
                ("ends", fmt_time(d["endsAt"].as_i64().expect("endsAt"))),
                (
                    "suggestion",
                    format!("renew with {suggested} of {slots} slots"),
                ),
                (
                    "renewal",
                    d["renewal"].as_str().expect("renewal").to_owned(),
                ),
            ]);
        } else {
            assert_eq!(ty, "reservation-grant.underused");
            let (from, to) = (&d["window"]["from"], &d["window"]["to"]);
            want.extend([
                ("kind", "Underused".to_owned()),
                (
                    "window",
                    format!(
                        "{} to {}",
                        fmt_time(from.as_i64().expect("from")),
                        fmt_time(to.as_i64().expect("to"))
                    ),
                ),
                (
                    "suggestion",
                    format!("{suggested} of {slots} slots would hold what ran"),
                ),
            ]);
        }
        for (name, value) in want {
            assert_eq!(chrome.text(&field(name)).await, value, "{name} of {ev}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_reads_a_grants_expiry_and_underuse_notices() {
    let s = Server::start().await;
    let w = noticed_world(&s).await;
    let notices = notices_of(&s, ROOT_TOKEN, ROOT, &w.grant).await;
    let mut kinds: Vec<(String, String)> = notices
        .iter()
        .map(|e| {
            let notice = e["data"]["notice"].as_str().unwrap_or("").to_owned();
            (e["type"].as_str().expect("type").to_owned(), notice)
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            ("reservation-grant.expiring".to_owned(), "1d".to_owned()),
            ("reservation-grant.expiring".to_owned(), "1h".to_owned()),
            ("reservation-grant.underused".to_owned(), String::new()),
        ],
        "{notices:?}"
    );
    for ev in &notices {
        let d = &ev["data"];
        assert_eq!(d["slots"], 2, "{ev}");
        if ev["type"] == "reservation-grant.expiring" {
            assert_eq!(d["renewal"], w.renewal.as_str(), "{ev}");
        }
        // The instance held 5 of the window's 48 slot-hours: a non-zero
        // share to show, below the 0.2 the notice is sent under.
        let u = micros(d["utilisation"].as_str().expect("utilisation"));
        assert!(u > 0 && u < 200_000, "{ev}");
    }

    let chrome = Chrome::launch().await;
    chrome.goto(&format!("{}/console/", s.url)).await;
    chrome.sign_in(ROOT, ROOT_TOKEN).await;
    chrome
        .wait_for(
            &format!(
                "document.querySelector(\"[data-testid=grant-row][data-grant-id='{}']\")",
                w.grant
            ),
            "the grant",
        )
        .await;
    assert_notices_shown(&chrome, &w.grant, &notices).await;
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-notices.png");
    chrome.screenshot(&target).await;

    // The renewal has no notice of its own yet, and the page says so.
    assert!(
        notices_of(&s, ROOT_TOKEN, ROOT, &w.renewal)
            .await
            .is_empty()
    );
    chrome
        .click(&format!(
            "[data-testid=grant-row][data-grant-id='{}']",
            w.renewal
        ))
        .await;
    chrome
        .wait_for(
            "document.querySelector('[data-testid=no-notices]') && \
             document.querySelectorAll('[data-testid=notice]').length === 0",
            "no notices for the renewal",
        )
        .await;
    chrome.assert_clean(&s.url, &[ROOT_TOKEN], &[]).await;
    chrome.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grantee_reads_its_own_notices_and_is_not_offered_the_preview() {
    let s = Server::start().await;
    let w = noticed_world(&s).await;
    // acme's own log holds its copies of the notices.
    let notices = notices_of(&s, &w.p.tenant_token, "acme", &w.grant).await;
    assert_eq!(notices.len(), 3, "{notices:?}");

    let chrome = Chrome::launch().await;
    chrome.goto(&format!("{}/console/", s.url)).await;
    chrome.sign_in("acme", &w.p.tenant_token).await;
    chrome
        .wait_for(
            "document.querySelectorAll('[data-testid=grant-row]').length === 2",
            "acme's two grants",
        )
        .await;
    assert_notices_shown(&chrome, &w.grant, &notices).await;

    // The reservation's timeline opens for a grantee, without the form.
    chrome
        .click(&format!(
            "[data-testid=grant-row][data-grant-id='{}'] [data-testid=grant-timeline]",
            w.grant
        ))
        .await;
    chrome
        .wait_for(
            "document.querySelector('[data-testid=timeline] [data-testid=grant-bar]')",
            "the timeline",
        )
        .await;
    let shown: bool = chrome
        .eval(
            "(() => { const b = document.querySelector('[data-testid=preview-panel]'); \
             return !b.hidden || getComputedStyle(b).display !== 'none' \
               || b.getClientRects().length > 0; })()",
        )
        .await;
    assert!(!shown, "a tenant is offered the preview form");
    chrome
        .assert_clean(&s.url, &[ROOT_TOKEN, &w.p.tenant_token], &[403])
        .await;
    chrome.close().await;
}

/// What the page shows of a preview answer, field by field.
async fn shown_preview(chrome: &Chrome) -> Value {
    let field = |name: &str| format!("[data-testid=preview-answer] [data-field={name}]");
    let take_in: Vec<String> = chrome
        .eval(
            "[...document.querySelectorAll('[data-testid=take-in-instance]')]\
             .map((e) => e.textContent)",
        )
        .await;
    json!({
        "fits": chrome
            .eval::<String>(
                "document.querySelector('[data-testid=preview-answer]').getAttribute('data-fits')"
            )
            .await == "true",
        "verdict": chrome.text(&field("fits")).await,
        "total": chrome.text(&field("total")).await,
        "granted": chrome.text(&field("granted")).await,
        "available": chrome.text(&field("available")).await,
        "slotHours": chrome.text(&field("slotHours")).await,
        "periods": chrome.text(&field("periods")).await,
        "takeIn": take_in,
    })
}

/// Fills the preview form and sends it.
async fn fill_preview(chrome: &Chrome, body: &Value) {
    chrome
        .type_into(
            "preview-tenant",
            body["grantTenantId"].as_str().expect("tenant"),
        )
        .await;
    chrome
        .type_into("preview-project", body["projectId"].as_str().unwrap_or(""))
        .await;
    chrome
        .type_into("preview-slots", &body["slots"].to_string())
        .await;
    chrome
        .set_value(
            "preview-start",
            &input_time(body["startsAt"].as_i64().expect("start")),
        )
        .await;
    chrome
        .set_value(
            "preview-end",
            &input_time(body["endsAt"].as_i64().expect("end")),
        )
        .await;
    // The answer box is emptied on sending, so what follows is this answer.
    chrome.click("[data-testid=preview-submit]").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_previews_a_grant_that_fits_and_one_that_does_not() {
    let s = Server::start().await;
    let start = next_hour(&s).await;
    s.set_clock(start).await;
    let p = PlatformBuilder::new().slots(4).build(&s).await;
    let web = project(&s, &p.tenant_token, "acme", "web").await;
    // acme runs two instances on ordinary slots; globex holds 3 of the 4
    // slots from hour 2 to hour 6.
    let mut running = vec![
        id(&InstanceBuilder::new(&p).create(&s).await),
        id(&InstanceBuilder::new(&p).create(&s).await),
    ];
    running.sort();
    tenant_with_pool(&s, "globex", &p.pool).await;
    GrantBuilder::new(&p)
        .grantee("globex")
        .slots(3)
        .term(start + 2 * HOUR, start + 6 * HOUR)
        .create(&s)
        .await;
    let now = start + 10 * MIN;
    s.set_clock(now).await;

    let chrome = Chrome::launch().await;
    chrome.goto(&format!("{}/console/", s.url)).await;
    chrome.sign_in(ROOT, ROOT_TOKEN).await;
    let row = format!(
        "[data-testid=reservation-row][data-reservation-id='{}']",
        p.reservation
    );
    chrome
        .wait_for(
            &format!("document.querySelector(\"{row}\")"),
            "the reservation",
        )
        .await;
    chrome.open_timeline(&row).await;
    chrome
        .wait_for(
            "!document.querySelector('[data-testid=preview-panel]').hidden",
            "the preview form",
        )
        .await;
    // The form starts on the next whole hour of the server's clock, for a day.
    let (from, to): (String, String) = chrome
        .eval(
            "[document.querySelector('[data-testid=preview-start]').value, \
              document.querySelector('[data-testid=preview-end]').value]",
        )
        .await;
    assert_eq!(
        (from, to),
        (input_time(start + HOUR), input_time(start + HOUR + DAY))
    );

    let grants_before = all_grants(&s).await;
    let db_before = contents(&s).await;
    let body = |tenant: &str, slots: i64, from: i64, to: i64| {
        GrantBody::on(&p, slots)
            .grantee(tenant)
            .term(from, to)
            .json()
    };
    // Fits: 2 slots from now to hour 1, taking in acme's two instances.
    // Does not fit: 2 slots (for acme's project) over globex's 3.
    let mut no_fit = body("acme", 2, start + HOUR, start + 3 * HOUR);
    no_fit["projectId"] = json!(web);
    for (what, asked, fits) in [
        ("fits", body("acme", 2, now, start + HOUR), true),
        ("does not fit", no_fit, false),
    ] {
        let api = s
            .root("reservationGrants/preview", asked.clone())
            .await
            .ok()["preview"]
            .clone();
        assert_eq!(api["fits"], fits, "{what}: {api}");
        fill_preview(&chrome, &asked).await;
        chrome
            .wait_for(
                &format!(
                    "document.querySelector('[data-testid=preview-answer][data-fits={fits}]')"
                ),
                what,
            )
            .await;
        let shown = shown_preview(&chrome).await;
        let mut take_in: Vec<String> =
            serde_json::from_value(api["takeIn"].clone()).expect("takeIn");
        take_in.sort();
        let mut shown_take_in: Vec<String> =
            serde_json::from_value(shown["takeIn"].clone()).expect("takeIn");
        shown_take_in.sort();
        assert_eq!(shown["fits"], api["fits"], "{what}");
        for k in ["total", "granted", "available"] {
            assert_eq!(shown[k], api[k].to_string(), "{what}: {k}");
        }
        assert_eq!(shown["slotHours"], api["slotHours"], "{what}");
        let periods = format!(
            "{} to {}",
            fmt_time(api["firstPeriodStart"].as_i64().expect("first")),
            fmt_time(api["lastPeriodEnd"].as_i64().expect("last"))
        );
        assert_eq!(shown["periods"], periods.as_str(), "{what}");
        assert_eq!(shown_take_in, take_in, "{what}");
        let verdict = shown["verdict"].as_str().expect("verdict");
        assert!(
            verdict.starts_with(if fits { "Fits" } else { "Does not fit" }),
            "{what}: {verdict}"
        );
        if fits {
            assert_eq!(take_in, running, "a start now takes in acme's instances");
        } else {
            assert!(take_in.is_empty() && api["available"] == 1, "{api}");
        }
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-preview.png");
    chrome.screenshot(&target).await;

    // A refusal reads as the API's code and message.
    let unknown = body("nobody", 1, start + HOUR, start + 2 * HOUR);
    let refused = s.root("reservationGrants/preview", unknown.clone()).await;
    refused.err(404, "NOT_FOUND");
    fill_preview(&chrome, &unknown).await;
    chrome
        .wait_for(
            "document.querySelector('[data-testid=preview-error]')",
            "the refusal",
        )
        .await;
    assert_eq!(
        chrome
            .text("[data-testid=preview-error] [data-field=code]")
            .await,
        "NOT_FOUND"
    );
    assert_eq!(
        chrome
            .text("[data-testid=preview-error] [data-field=message]")
            .await,
        refused.body["error"]["message"].as_str().expect("message")
    );

    // Previews wrote nothing: no grant, no row anywhere.
    assert_eq!(pairs(&all_grants(&s).await), pairs(&grants_before));
    assert_eq!(
        contents(&s).await,
        db_before,
        "a preview wrote to the database"
    );
    chrome.assert_clean(&s.url, &[ROOT_TOKEN], &[404]).await;
    chrome.close().await;
}
