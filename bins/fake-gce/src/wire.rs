//! Bodies in and answers out: the size limit, JSON objects, and errors in
//! Google's API shape.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use serde_json::{Map, Value, json};

const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Why a body could not be read.
pub(crate) enum BodyError {
    TooLarge,
    Unreadable,
}

pub(crate) async fn read_bytes<B>(request: Request<B>) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    match Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Unreadable),
    }
}

pub(crate) async fn read_json<B>(
    request: Request<B>,
) -> Result<Map<String, Value>, Response<Full<Bytes>>>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let bytes = match read_bytes(request).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid",
                "body over 1 MiB",
            ));
        }
        Err(BodyError::Unreadable) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "could not read the body",
            ));
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "the body must be a JSON object",
        )),
    }
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    response
}

/// An error in the Google API shape.
pub(crate) fn error(status: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    json_response(
        status,
        &json!({
            "error": {
                "code": status.as_u16(),
                "message": message,
                "errors": [{ "domain": "global", "reason": reason, "message": message }]
            }
        }),
    )
}

pub(crate) fn not_found() -> Response<Full<Bytes>> {
    error(
        StatusCode::NOT_FOUND,
        "notFound",
        "The resource was not found.",
    )
}

pub(crate) fn method_not_allowed() -> Response<Full<Bytes>> {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "httpMethodNotAllowed",
        "Method not allowed.",
    )
}
