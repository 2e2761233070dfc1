//! An in-process OTLP trace receiver for end-to-end tests, built from the official
//! `opentelemetry-proto` definitions: what the proxy's exporter sends is decoded by the same
//! generated code a collector uses, so a test checks the wire format and not only our own encoder.
//!
//! Include it with `#[path = "support/otlp.rs"] mod otlp;`. It serves either OTLP/gRPC (tonic) or
//! OTLP/HTTP with protobuf bodies (hyper, `POST /v1/traces`) on 127.0.0.1, records every span and
//! the headers of every export request, and can be stopped (the listener and every open connection
//! closed, so an exporter sees failures), restarted on the same port, told to refuse exports, or
//! told to hold them (counted on arrival, answered only when released: a collector that hangs).
//!
//! The port comes from `support::ports::free_port()` (so the including test binary also declares
//! `mod support;`): below the ephemeral range and handed out once per process, it is still this
//! receiver's when a restart binds it again, whatever other tests bound meanwhile.
#![allow(dead_code)] // each test binary uses a different part of it

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The OTLP transport a [`Receiver`] serves: the exporter under test is configured for one of the
/// two, and each needs its own server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC: `opentelemetry.proto.collector.trace.v1.TraceService/Export` over HTTP/2.
    Grpc,
    /// OTLP/HTTP: `POST /v1/traces` with an `application/x-protobuf` body.
    HttpProtobuf,
}

/// An attribute value, owned and flattened from OTLP's `AnyValue`, so tests compare plain values.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// The OTLP value kinds spans carry, one variant each.
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
    Array(Vec<AttrValue>),
    /// A kind tracing never sends here (bytes, key-value lists, an empty value): present, not
    /// compared.
    Other,
}

impl AttrValue {
    /// The string, if this is one: most span attributes (routes, models, dialects) are strings.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one (token counts, status codes).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The number as f64, from a double or an integer: a test checking a duration or a ratio need
    /// not care which of the two the exporter chose.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttrValue::Double(d) => Some(*d),
            AttrValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            AttrValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    fn from_any(value: Option<&AnyValue>) -> AttrValue {
        match value.and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(s)) => AttrValue::Str(s.clone()),
            Some(Value::IntValue(i)) => AttrValue::Int(*i),
            Some(Value::DoubleValue(d)) => AttrValue::Double(*d),
            Some(Value::BoolValue(b)) => AttrValue::Bool(*b),
            Some(Value::ArrayValue(a)) => AttrValue::Array(
                a.values
                    .iter()
                    .map(|v| AttrValue::from_any(Some(v)))
                    .collect(),
            ),
            _ => AttrValue::Other,
        }
    }
}

/// Key-value pairs as a sorted map: OTLP sends a list, but tests look attributes up by key and
/// print them in a stable order.
fn attr_map(attributes: &[KeyValue]) -> BTreeMap<String, AttrValue> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), AttrValue::from_any(kv.value.as_ref())))
        .collect()
}

/// Lowercase hex, the form trace and span ids take in logs and `traceparent` headers, so a test
/// compares them with what the proxy propagated.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One received span, owned and flattened out of its ResourceSpans/ScopeSpans, with its resource
/// and scope copied in: a test finds a span and checks everything about it in one place.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// 16 lowercase hex digits, or empty for a root span.
    pub parent_span_id: String,
    /// The span name (a route, "upstream", ...).
    pub name: String,
    /// OTLP's `SpanKind` number; see [`ReceivedSpan::kind_name`].
    pub kind: i32,
    /// Start and end, unix nanoseconds: a test checks ordering and durations against the clock.
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    /// The span's attributes by key.
    pub attributes: BTreeMap<String, AttrValue>,
    /// (name, time in unix nanoseconds, attributes) of each event, in the span's order.
    pub events: Vec<(String, u64, BTreeMap<String, AttrValue>)>,
    /// OTLP's `StatusCode` number: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    /// The status description (set with an error status).
    pub status_message: String,
    /// The attributes of the span's resource (`service.name`, ...).
    pub resource: BTreeMap<String, AttrValue>,
    /// The instrumentation scope's name.
    pub scope_name: String,
    /// The W3C trace flags (bit 0: sampled) and OTLP's remote-parent bits.
    pub flags: u32,
}

impl ReceivedSpan {
    /// The span kind as a word, for readable asserts and failure messages.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            0 => "unspecified",
            1 => "internal",
            2 => "server",
            3 => "client",
            4 => "producer",
            5 => "consumer",
            _ => "unknown",
        }
    }

    /// The attribute `key`, whatever its type.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes.get(key)
    }

    /// The string attribute `key` (None if absent or not a string).
    pub fn str_attr(&self, key: &str) -> Option<&str> {
        self.attr(key).and_then(AttrValue::as_str)
    }

    /// The integer attribute `key` (None if absent or not an integer).
    pub fn int_attr(&self, key: &str) -> Option<i64> {
        self.attr(key).and_then(AttrValue::as_i64)
    }

    /// The numeric attribute `key` as f64, accepting an integer too.
    pub fn f64_attr(&self, key: &str) -> Option<f64> {
        self.attr(key).and_then(AttrValue::as_f64)
    }

    /// The events named `name`, for a test that checks one kind of event.
    pub fn events_named(&self, name: &str) -> Vec<&(String, u64, BTreeMap<String, AttrValue>)> {
        self.events.iter().filter(|e| e.0 == name).collect()
    }
}

/// Every span of one export request, flattened in the request's order.
fn flatten(request: &ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attr_map(&r.attributes))
            .unwrap_or_default();
        for ss in &rs.scope_spans {
            let scope_name = ss
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for span in &ss.spans {
                let status = span.status.as_ref();
                out.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    kind: span.kind,
                    start_unix_nanos: span.start_time_unix_nano,
                    end_unix_nanos: span.end_time_unix_nano,
                    attributes: attr_map(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), e.time_unix_nano, attr_map(&e.attributes)))
                        .collect(),
                    status_code: status.map_or(0, |s| s.code),
                    status_message: status.map(|s| s.message.clone()).unwrap_or_default(),
                    resource: resource.clone(),
                    scope_name: scope_name.clone(),
                    flags: span.flags,
                });
            }
        }
    }
    out
}

/// What was received, kept across stop/restart.
#[derive(Default)]
struct Recorded {
    spans: Vec<ReceivedSpan>,
    headers: Vec<HeaderMap>,
    requests: usize,
}

/// State shared by the servers and the test.
struct Shared {
    recorded: Mutex<Recorded>,
    /// The status refused exports get; see [`Receiver::refuse`].
    refuse: Mutex<Option<u16>>,
    /// The number of spans stored, so waiters wake on arrival instead of polling.
    span_count: watch::Sender<usize>,
    /// The number of export requests counted, for the same reason.
    request_count: watch::Sender<usize>,
    /// While true, exports are counted on arrival and answered only once it turns false; see
    /// [`Receiver::hold`].
    held: watch::Sender<bool>,
}

impl Shared {
    fn recorded(&self) -> MutexGuard<'_, Recorded> {
        // A panicking test thread must not hide what arrived from the others.
        self.recorded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one export request and keeps its headers; then, once no hold is on, stores its
    /// spans unless refusing, in which case the refusal status is returned.
    async fn record(
        &self,
        headers: HeaderMap,
        request: &ExportTraceServiceRequest,
    ) -> Result<(), u16> {
        {
            let mut recorded = self.recorded();
            recorded.requests += 1;
            recorded.headers.push(headers);
            self.request_count.send_replace(recorded.requests);
        }
        // Counted before the hold, so a test can wait for the export it holds to be in flight.
        // The sender lives as long as `self`, so this only returns once released.
        let _ = self.held.subscribe().wait_for(|held| !held).await;
        if let Some(status) = *self.refuse.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(status);
        }
        let mut recorded = self.recorded();
        recorded.spans.extend(flatten(request));
        self.span_count.send_replace(recorded.spans.len());
        Ok(())
    }
}

/// A running server: its task and the token whose cancellation kills its connections.
struct Running {
    task: JoinHandle<()>,
    kill: CancellationToken,
}

/// An OTLP trace receiver on 127.0.0.1, serving in a tokio task of the test's runtime.
pub struct Receiver {
    protocol: Protocol,
    port: u16,
    shared: Arc<Shared>,
    running: Option<Running>,
}

impl Receiver {
    /// Serves `protocol` on 127.0.0.1 at a port of `ports::free_port()`: the port stays this
    /// receiver's across [`Receiver::stop`] and [`Receiver::restart`], since no other caller in
    /// the process gets it and no `bind(0)` can (it is below the ephemeral range).
    pub async fn start(protocol: Protocol) -> Receiver {
        let port = crate::support::ports::free_port();
        let listener = bind(port);
        let shared = Arc::new(Shared {
            recorded: Mutex::new(Recorded::default()),
            refuse: Mutex::new(None),
            span_count: watch::Sender::new(0),
            request_count: watch::Sender::new(0),
            held: watch::Sender::new(false),
        });
        let running = Some(serve(protocol, listener, shared.clone()));
        Receiver {
            protocol,
            port,
            shared,
            running,
        }
    }

    /// The exporter's endpoint: `http://127.0.0.1:PORT`, for gRPC and (as the base the exporter
    /// or the test appends `/v1/traces` to) for HTTP.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The full OTLP/HTTP traces URL: [`Receiver::endpoint`] + `/v1/traces`, for an exporter
    /// configured with the signal's URL rather than the base.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint())
    }

    /// The port served on; the same across [`Receiver::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The protocol served.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Stops serving: the listener is closed (new connections are refused) and every open
    /// connection is closed too, so an exporter holding an HTTP/2 connection sees it fail rather
    /// than keep talking to a server the test considers down. Received spans are kept.
    pub async fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            // Cancelling first makes every connection's next read or write fail (also in the
            // tasks tonic spawned per connection, which aborting the accept task would not end);
            // hyper then drops the connection, closing its socket.
            running.kill.cancel();
            running.task.abort();
            // Await the cancelled task so the listener is closed when stop() returns.
            let _ = running.task.await;
        }
    }

    /// Serves again on the same port (after [`Receiver::stop`], which returns once the old
    /// listener is closed).
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = bind(self.port);
        self.running = Some(serve(self.protocol, listener, self.shared.clone()));
    }

    /// Whether the receiver is serving (between start/restart and stop).
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// While `Some(status)`, exports are counted (and their headers kept) but their spans are not
    /// stored: HTTP answers `status` (e.g. 503) and gRPC answers `Unavailable`. This is how a
    /// test shows an exporter's retries or drop accounting against a collector that is up but
    /// failing. `None` accepts again.
    pub fn refuse(&self, status: Option<u16>) {
        *self.shared.refuse.lock().unwrap_or_else(|e| e.into_inner()) = status;
    }

    /// While `true`, every export is counted (and its headers kept) on arrival and then left
    /// unanswered until `hold(false)`: an exporter blocked on a collector that hangs, for as long
    /// as the test needs and no longer (no timing involved). Released exports are then stored or
    /// refused as usual. Dropping the receiver releases them too.
    pub fn hold(&self, hold: bool) {
        self.shared.held.send_replace(hold);
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared.recorded().spans.clone()
    }

    /// Waits until at least `n` spans have arrived and returns all of them; panics after
    /// `timeout`, listing what did arrive (so a failure says which spans are missing).
    pub async fn wait_for_spans(&self, n: usize, timeout: Duration) -> Vec<ReceivedSpan> {
        let mut count = self.shared.span_count.subscribe();
        let waited = tokio::time::timeout(timeout, count.wait_for(|&c| c >= n)).await;
        if waited.is_err() {
            let spans = self.spans();
            let listed: Vec<String> = spans
                .iter()
                .map(|s| {
                    format!(
                        "{} ({}, trace {}, span {}, parent {:?})",
                        s.name,
                        s.kind_name(),
                        s.trace_id,
                        s.span_id,
                        s.parent_span_id
                    )
                })
                .collect();
            panic!(
                "OTLP receiver ({:?}, port {}): waited {timeout:?} for {n} spans, got {} in {} \
                 export requests: {listed:#?}",
                self.protocol,
                self.port,
                spans.len(),
                self.requests()
            );
        }
        self.spans()
    }

    /// Waits until at least `n` export requests have been counted (held ones included); panics
    /// after `timeout`. Returns the count.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> usize {
        let mut count = self.shared.request_count.subscribe();
        let waited = tokio::time::timeout(timeout, count.wait_for(|&c| c >= n)).await;
        assert!(
            waited.is_ok(),
            "OTLP receiver ({:?}, port {}): waited {timeout:?} for {n} export requests, got {}",
            self.protocol,
            self.port,
            self.requests()
        );
        self.requests()
    }

    /// The number of export requests received (refused and held ones included; malformed ones,
    /// wrong paths and content types not).
    pub fn requests(&self) -> usize {
        self.shared.recorded().requests
    }

    /// The headers of each export request, in arrival order (gRPC metadata as headers): a test
    /// checks that headers configured on the exporter (e.g. `authorization`) arrive.
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.shared.recorded().headers.clone()
    }
}

impl Drop for Receiver {
    /// A test that ends without stop() must not leave the server and its connections running,
    /// nor an export handler waiting on a hold nobody will release.
    fn drop(&mut self) {
        self.shared.held.send_replace(false);
        if let Some(running) = self.running.take() {
            running.kill.cancel();
            running.task.abort();
        }
    }
}

/// A listener on 127.0.0.1:`port` with SO_REUSEADDR, so a restart binds again while connections
/// the stopped receiver had accepted linger (closing, or in TIME_WAIT). No retry: the port is this
/// receiver's (see [`Receiver::start`]) and stop() closed its listener, so a failure here is a bug
/// (or a process outside the tests on the port) and is reported as one.
fn bind(port: u16) -> TcpListener {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpSocket::new_v4()
        .and_then(|socket| {
            socket.set_reuseaddr(true)?;
            socket.bind(addr)?;
            socket.listen(1024)
        })
        .unwrap_or_else(|e| {
            panic!(
                "OTLP receiver: bind {addr}: {e} (a port from ports::free_port(), held by no \
                 other listener of this process: is the receiver's old listener still open, or \
                 another process on it?)"
            )
        })
}

/// Starts serving `protocol` on `listener` in a new task.
fn serve(protocol: Protocol, listener: TcpListener, shared: Arc<Shared>) -> Running {
    let kill = CancellationToken::new();
    let task = match protocol {
        Protocol::Grpc => tokio::spawn(serve_grpc(listener, shared, kill.clone())),
        Protocol::HttpProtobuf => tokio::spawn(serve_http(listener, shared, kill.clone())),
    };
    Running { task, kill }
}

/// An accepted connection that fails every read and write once its receiver is stopped, waking
/// the task polling it: tonic spawns each connection's task itself, out of our reach, so this is
/// how stop() closes them.
struct Conn {
    io: TcpStream,
    killed: Pin<Box<WaitForCancellationFutureOwned>>,
    dead: bool,
}

impl Conn {
    fn new(io: TcpStream, kill: &CancellationToken) -> Conn {
        let _ = io.set_nodelay(true);
        Conn {
            io,
            killed: Box::pin(kill.clone().cancelled_owned()),
            dead: false,
        }
    }

    /// An error once the receiver is stopped; registers `cx` to be woken when it is.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.dead && self.killed.as_mut().poll(cx).is_ready() {
            self.dead = true;
        }
        if self.dead {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "OTLP receiver stopped",
            ))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.io.connect_info()
    }
}

/// The listener as the stream of connections tonic serves.
struct Accept {
    listener: TcpListener,
    kill: CancellationToken,
}

impl Stream for Accept {
    type Item = io::Result<Conn>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.listener
            .poll_accept(cx)
            .map(|accepted| Some(accepted.map(|(io, _)| Conn::new(io, &this.kill))))
    }
}

/// The generated gRPC service's implementation: records, or refuses with `Unavailable`.
struct Grpc(Arc<Shared>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = request.metadata().clone().into_headers();
        match self.0.record(headers, request.get_ref()).await {
            Ok(()) => Ok(tonic::Response::new(ExportTraceServiceResponse {
                partial_success: None,
            })),
            Err(status) => Err(tonic::Status::unavailable(format!(
                "OTLP receiver refusing (HTTP status {status})"
            ))),
        }
    }
}

async fn serve_grpc(listener: TcpListener, shared: Arc<Shared>, kill: CancellationToken) {
    // No graceful shutdown (GOAWAY, then waiting for streams): stop() is a collector crash, the
    // Conn kill closes every connection at once, whatever it is doing.
    let incoming = Accept { listener, kill };
    let result = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(Grpc(shared)))
        .serve_with_incoming(incoming)
        .await;
    if let Err(e) = result {
        eprintln!("OTLP gRPC receiver: {e}");
    }
}

async fn serve_http(listener: TcpListener, shared: Arc<Shared>, kill: CancellationToken) {
    // Connection tasks live in this set, so aborting this task ends them too (the Conn kill does
    // as well; either suffices).
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((io, _)) = accepted else {
                    // EMFILE and the like: do not spin.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let conn = Conn::new(io, &kill);
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        handle_http(shared.clone(), request)
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(conn), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = kill.cancelled() => return,
        }
    }
}

/// A response with a plain-text body, for the error answers.
fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    response
}

/// OTLP/HTTP with protobuf bodies: `POST /v1/traces`, `application/x-protobuf` (JSON is not
/// served: the exporter under test is configured for protobuf, so JSON would be a bug).
async fn handle_http(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.uri().path() != "/v1/traces" {
        return Ok(text(StatusCode::NOT_FOUND, "not found"));
    }
    if request.method() != http::Method::POST {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "POST only"));
    }
    let protobuf = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/x-protobuf"));
    if !protobuf {
        return Ok(text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "only application/x-protobuf",
        ));
    }
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Ok(text(StatusCode::BAD_REQUEST, &format!("body: {e}"))),
    };
    let decoded = match ExportTraceServiceRequest::decode(body) {
        Ok(decoded) => decoded,
        Err(e) => return Ok(text(StatusCode::BAD_REQUEST, &format!("decode: {e}"))),
    };
    match shared.record(parts.headers, &decoded).await {
        Ok(()) => {
            let encoded = ExportTraceServiceResponse {
                partial_success: None,
            }
            .encode_to_vec();
            let mut response = Response::new(Full::new(Bytes::from(encoded)));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/x-protobuf"),
            );
            Ok(response)
        }
        Err(status) => Ok(text(
            StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            "refusing",
        )),
    }
}
