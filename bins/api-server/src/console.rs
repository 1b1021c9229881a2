//! The operator console: a static page (HTML, one script, one stylesheet and
//! an icon) compiled into the binary from `assets/console/` and served under
//! `/console/`. The page calls the API from the browser with the key the
//! operator types; the server holds no session for it.

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::Full;

use crate::error::{ApiError, Code};
use crate::server::error_response;

/// The page's Content-Security-Policy: its own script, style, images and API
/// calls, nothing inline, nothing from elsewhere, never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// Where the console lives.
pub const ROOT: &str = "/console/";

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const INDEX: &[u8] = include_bytes!("../assets/console/index.html");

const ASSETS: &[Asset] = &[
    Asset {
        path: "/console/",
        content_type: "text/html; charset=utf-8",
        body: INDEX,
    },
    Asset {
        path: "/console/index.html",
        content_type: "text/html; charset=utf-8",
        body: INDEX,
    },
    Asset {
        path: "/console/console.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/console/console.js"),
    },
    Asset {
        path: "/console/console.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../assets/console/console.css"),
    },
    Asset {
        path: "/console/favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../assets/console/favicon.svg"),
    },
];

type Resp = Response<Full<Bytes>>;

/// Whether `path` is the console's: `/console` or anything under `/console/`.
pub fn owns(path: &str) -> bool {
    path == "/console" || path.starts_with(ROOT)
}

/// Answers a request for one of the console's paths: an asset for GET and
/// HEAD, `/console` redirected to `/console/` (so relative asset URLs
/// resolve), 405 for any other HTTP method and 404 for a file it does not
/// have.
pub fn serve(method: &Method, path: &str) -> Resp {
    let asset = ASSETS.iter().find(|a| a.path == path);
    if path != "/console" && asset.is_none() {
        return error_response(&ApiError::new(
            Code::NotFound,
            format!("no such path: {path}"),
        ));
    }
    if method != Method::GET && method != Method::HEAD {
        let mut resp = error_response(&ApiError::new(
            Code::MethodNotAllowed,
            format!("use GET on {path}"),
        ));
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    let mut resp = match asset {
        Some(a) => {
            let mut resp = Response::new(Full::new(Bytes::from_static(a.body)));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(a.content_type),
            );
            resp
        }
        None => {
            let mut resp = Response::new(Full::new(Bytes::new()));
            *resp.status_mut() = StatusCode::PERMANENT_REDIRECT;
            resp.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static(ROOT));
            resp
        }
    };
    let headers = resp.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_served_with_its_type_and_the_policy() {
        for a in ASSETS {
            let resp = serve(&Method::GET, a.path);
            assert_eq!(resp.status(), StatusCode::OK, "{}", a.path);
            let h = resp.headers();
            assert_eq!(h[header::CONTENT_TYPE], a.content_type);
            assert_eq!(h[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
            assert_eq!(h[header::CACHE_CONTROL], "no-cache");
            assert!(!a.body.is_empty(), "{} is empty", a.path);
        }
    }

    #[test]
    fn the_page_has_no_inline_script_or_style_and_names_no_other_origin() {
        let html = std::str::from_utf8(INDEX).expect("utf-8");
        assert!(html.contains(r#"<script src="console.js" defer></script>"#));
        assert!(!html.contains("<style"), "inline style element");
        assert!(!html.contains("style="), "inline style attribute");
        assert_eq!(html.matches("<script").count(), 1, "one script, by src");
        for a in ASSETS {
            let text = std::str::from_utf8(a.body).expect("utf-8");
            assert!(!text.contains("//cdn"), "{} names a CDN", a.path);
            assert!(
                !text.contains("https://"),
                "{} names another origin",
                a.path
            );
        }
    }

    #[test]
    fn other_methods_and_unknown_files_are_refused() {
        let resp = serve(&Method::POST, "/console/");
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()[header::ALLOW], "GET, HEAD");
        assert_eq!(
            serve(&Method::GET, "/console/nope.js").status(),
            StatusCode::NOT_FOUND
        );
        let resp = serve(&Method::GET, "/console");
        assert_eq!(resp.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(resp.headers()[header::LOCATION], "/console/");
    }
}
