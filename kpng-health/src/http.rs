//! The HTTP/1.1 server behind health-check node ports, `/healthz`,
//! `/livez` and `/metrics`, on hyper: keep-alive, HEAD, requests that
//! arrive in pieces, a time limit on reading a request's head, and a
//! backoff when accepting fails (out of file descriptors, say) instead of
//! a loop that spins.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

/// How long a client may take to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest wait between accept attempts after errors.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// One response: status, content type and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: String,
}

impl Reply {
    /// A JSON response.
    pub(crate) fn json(status: u16, body: &serde_json::Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: body.to_string(),
        }
    }

    /// `404` with a JSON body.
    pub(crate) fn not_found() -> Self {
        Self::json(404, &serde_json::json!({"error": "not found"}))
    }
}

/// Serves `listener` until the task is dropped: each GET or HEAD gets
/// `answer(path)` (HEAD without the body), any other method `405`.
pub(crate) async fn serve<F>(listener: TcpListener, answer: F)
where
    F: Fn(&str) -> Reply + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let mut backoff = Duration::ZERO;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Duration::ZERO;
                stream
            }
            Err(error) => {
                // EMFILE and the like last until something closes: wait.
                backoff = (backoff * 2).clamp(Duration::from_millis(5), MAX_BACKOFF);
                tracing::warn!(%error, ?backoff, "accepting a connection failed");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let answer = answer.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let reply = respond(&request, &*answer);
                async move { Ok::<_, Infallible>(reply) }
            });
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%error, "HTTP connection ended");
            }
        });
    }
}

fn respond<B>(request: &Request<B>, answer: &dyn Fn(&str) -> Reply) -> Response<Full<Bytes>> {
    let get = request.method() == Method::GET || request.method() == Method::HEAD;
    let reply = if get {
        answer(request.uri().path())
    } else {
        Reply::json(405, &serde_json::json!({"error": "method not allowed"}))
    };
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    if !get {
        headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    response
}
