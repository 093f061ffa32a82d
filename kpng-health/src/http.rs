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
    serve_from(listener, answer).await;
}

/// Where connections come from: a listening socket, or a test's stand-in.
pub(crate) trait Acceptor {
    /// A connection.
    type Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    /// The next connection, or why none could be accepted.
    fn accept(&mut self) -> impl Future<Output = std::io::Result<Self::Stream>> + Send;
}

impl Acceptor for TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept(&mut self) -> std::io::Result<Self::Stream> {
        TcpListener::accept(self).await.map(|(stream, _)| stream)
    }
}

/// [`serve`] on the connections `acceptor` gives.
pub(crate) async fn serve_from<A, F>(mut acceptor: A, answer: F)
where
    A: Acceptor,
    F: Fn(&str) -> Reply + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let mut backoff = Duration::ZERO;
    loop {
        let stream = match acceptor.accept().await {
            Ok(stream) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// Fails `errors` times (out of file descriptors), then hands out the
    /// streams it is sent. Counts attempts; past 1,000 it stops answering,
    /// so a loop that spins ends up idle and the test can see it.
    struct Failing {
        errors: usize,
        attempts: Arc<AtomicUsize>,
        streams: tokio::sync::mpsc::Receiver<DuplexStream>,
    }

    impl Acceptor for Failing {
        type Stream = DuplexStream;
        async fn accept(&mut self) -> std::io::Result<DuplexStream> {
            if self.attempts.fetch_add(1, Ordering::SeqCst) >= 1_000 {
                std::future::pending::<()>().await;
            }
            if self.errors > 0 {
                self.errors -= 1;
                return Err(std::io::Error::from_raw_os_error(24)); // EMFILE
            }
            match self.streams.recv().await {
                Some(stream) => Ok(stream),
                None => std::future::pending().await,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn accept_errors_back_off_instead_of_spinning_and_serving_resumes() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let (send, streams) = tokio::sync::mpsc::channel(1);
        let acceptor = Failing {
            errors: 40,
            attempts: attempts.clone(),
            streams,
        };
        let server = tokio::spawn(serve_from(acceptor, |_| {
            Reply::json(200, &serde_json::json!({"ok": true}))
        }));
        // Ten seconds of (paused, virtual) time: waits of 5 ms doubling to
        // 1 s leave room for about 17 attempts; a loop without a wait makes
        // its 1,000 at once.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let seen = attempts.load(Ordering::SeqCst);
        assert!((10..=20).contains(&seen), "{seen} accept attempts in 10 s");

        // Once accepting works again (after the 40 errors), requests are
        // served.
        tokio::time::sleep(Duration::from_secs(40)).await;
        let (mut client, stream) = tokio::io::duplex(4096);
        send.send(stream).await.expect("the server takes it");
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("request");
        let mut response = String::new();
        client
            .read_to_string(&mut response)
            .await
            .expect("response");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(attempts.load(Ordering::SeqCst) > 40);
        server.abort();
    }
}
