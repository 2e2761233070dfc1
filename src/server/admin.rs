//! The admin listener: `/metrics` (every series, the admission limits' included; in the protobuf
//! format when the scraper asks for it, which carries the native histograms), `/healthz`
//! (the process is alive) and `/readyz` (503 once draining). On its own port, so API clients
//! never see metrics and a Service can send traffic and scrapes to different places.
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use super::admission::Limits;
use crate::metrics::{protobuf, Metrics};
use crate::tls::acceptor::handshake;
use crate::tls::{self, ServerTls};

/// How long a scraper may take to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    metrics: Arc<Metrics>,
    limits: Arc<Limits>,
    ready: Arc<AtomicBool>,
) {
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let metrics = Arc::clone(&metrics);
        let limits = Arc::clone(&limits);
        let ready = Arc::clone(&ready);
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = {
                let metrics = Arc::clone(&metrics);
                hyper::service::service_fn(move |req: Request<Incoming>| {
                    let accept = req
                        .headers()
                        .get(header::ACCEPT)
                        .and_then(|value| value.to_str().ok());
                    let response = route(req.uri().path(), accept, &metrics, &limits, &ready);
                    async move { Ok::<_, Infallible>(response) }
                })
            };
            let builder = auto::Builder::new(TokioExecutor::new());
            let Some(tls) = tls else {
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                return;
            };
            match handshake(tls.acceptor(), stream, HANDSHAKE_TIMEOUT).await {
                Ok(stream) => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                Err((failure, err)) => {
                    tls::series::handshake_failed(&metrics, "admin", failure);
                    tracing::debug!(error = %err, reason = failure.as_str(), "admin TLS handshake failed");
                }
            }
        });
    }
}

fn route(
    path: &str,
    accept: Option<&str>,
    metrics: &Metrics,
    limits: &Limits,
    ready: &AtomicBool,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    };
    const PLAIN: &str = "text/plain; charset=utf-8";
    match path {
        "/metrics" if accept.is_some_and(protobuf::wants_protobuf) => {
            let mut response = Response::new(Full::new(Bytes::from(
                metrics.render_protobuf(&super::series::render(limits)),
            )));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(protobuf::CONTENT_TYPE),
            );
            response
        }
        "/metrics" => text(
            StatusCode::OK,
            metrics.render() + &super::series::render(limits),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        "/healthz" => text(StatusCode::OK, "ok\n".to_owned(), PLAIN),
        "/readyz" if ready.load(Ordering::SeqCst) => {
            text(StatusCode::OK, "ready\n".to_owned(), PLAIN)
        }
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining\n".to_owned(),
            PLAIN,
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n".to_owned(), PLAIN),
    }
}
