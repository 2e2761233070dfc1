//! Self-tests of the OTLP receiver in tests/support/otlp.rs (no proxy involved): what a client
//! exports over gRPC or HTTP/protobuf arrives intact, wrong requests are answered as a collector
//! would, stop() really cuts exporters off and restart() serves the same port again, and refusing
//! counts attempts without storing spans, and holding leaves an export unanswered until released.

use crate::support::otlp;

// The receiver takes its port from support::ports.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};
use otlp::{AttrValue, Protocol, ReceivedSpan, Receiver};
use prost::Message;
use tonic::transport::Channel;

/// Every wait in these tests is bounded by this. Only a hang guard: each wait is for a loopback
/// connect or one export's round trip, milliseconds even on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(5);

const TRACE_ID: [u8; 16] = [
    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c,
];
const TRACE_HEX: &str = "0af7651916cd43dd8448eb211c80319c";
const SERVER_ID: [u8; 8] = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];
const SERVER_HEX: &str = "b7ad6b7169203331";
const CLIENT_ID: [u8; 8] = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
const CLIENT_HEX: &str = "00f067aa0ba902b7";
const START: u64 = 1_700_000_000_000_000_000;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// One resource (service.name = "t") with a server span and its child client span.
fn request() -> ExportTraceServiceRequest {
    let server = Span {
        trace_id: TRACE_ID.to_vec(),
        span_id: SERVER_ID.to_vec(),
        flags: 0x101,
        name: "POST /v1/chat/completions".to_owned(),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: START,
        end_time_unix_nano: START + 2_000_000,
        attributes: vec![
            kv("http.request.method", Value::StringValue("POST".to_owned())),
            kv("http.response.status_code", Value::IntValue(200)),
            kv("tokenmeter.ttft_seconds", Value::DoubleValue(0.125)),
            kv("tokenmeter.streamed", Value::BoolValue(true)),
        ],
        events: vec![span::Event {
            time_unix_nano: START + 1_000_000,
            name: "first_token".to_owned(),
            attributes: vec![kv("tokens", Value::IntValue(1))],
            dropped_attributes_count: 0,
        }],
        status: Some(Status {
            message: String::new(),
            code: 1,
        }),
        ..Default::default()
    };
    let client = Span {
        trace_id: TRACE_ID.to_vec(),
        span_id: CLIENT_ID.to_vec(),
        parent_span_id: SERVER_ID.to_vec(),
        flags: 0x301,
        name: "upstream".to_owned(),
        kind: span::SpanKind::Client as i32,
        start_time_unix_nano: START + 100,
        end_time_unix_nano: START + 1_900_000,
        attributes: vec![kv("server.port", Value::IntValue(8000))],
        status: Some(Status {
            message: "upstream reset".to_owned(),
            code: 2,
        }),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", Value::StringValue("t".to_owned()))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "tokenmeter".to_owned(),
                    ..Default::default()
                }),
                spans: vec![server, client],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The two spans of [`request`], as received (starting at `first`).
fn check_spans(spans: &[ReceivedSpan], first: usize) {
    assert!(
        spans.len() >= first + 2,
        "expected spans {first}..{}, got {spans:#?}",
        first + 2
    );
    let server = &spans[first];
    let client = &spans[first + 1];
    let service: BTreeMap<String, AttrValue> =
        [("service.name".to_owned(), AttrValue::Str("t".to_owned()))].into();

    assert_eq!(server.trace_id, TRACE_HEX, "server span trace id");
    assert_eq!(server.span_id, SERVER_HEX, "server span id");
    assert_eq!(server.parent_span_id, "", "server span is a root");
    assert_eq!(server.name, "POST /v1/chat/completions", "server span name");
    assert_eq!(server.kind, 2, "server span kind number");
    assert_eq!(server.kind_name(), "server", "server span kind");
    assert_eq!(server.start_unix_nanos, START, "server span start");
    assert_eq!(server.end_unix_nanos, START + 2_000_000, "server span end");
    assert_eq!(server.flags, 0x101, "server span flags");
    assert_eq!(
        server.str_attr("http.request.method"),
        Some("POST"),
        "string attribute"
    );
    assert_eq!(
        server.int_attr("http.response.status_code"),
        Some(200),
        "int attribute"
    );
    assert_eq!(
        server.f64_attr("http.response.status_code"),
        Some(200.0),
        "f64_attr accepts an int"
    );
    assert_eq!(
        server.f64_attr("tokenmeter.ttft_seconds"),
        Some(0.125),
        "double attribute"
    );
    assert_eq!(
        server.attr("tokenmeter.streamed"),
        Some(&AttrValue::Bool(true)),
        "bool attribute"
    );
    assert_eq!(
        server.attributes.len(),
        4,
        "server span attributes: {server:#?}"
    );
    assert_eq!(
        server.events,
        vec![(
            "first_token".to_owned(),
            START + 1_000_000,
            [("tokens".to_owned(), AttrValue::Int(1))].into()
        )],
        "server span event"
    );
    assert_eq!(server.status_code, 1, "server span status ok");
    assert_eq!(server.resource, service, "server span resource");
    assert_eq!(server.scope_name, "tokenmeter", "server span scope");

    assert_eq!(client.trace_id, TRACE_HEX, "client span trace id");
    assert_eq!(client.span_id, CLIENT_HEX, "client span id");
    assert_eq!(client.parent_span_id, SERVER_HEX, "client span's parent");
    assert_eq!(client.name, "upstream", "client span name");
    assert_eq!(client.kind_name(), "client", "client span kind");
    assert_eq!(client.flags, 0x301, "client span flags");
    assert_eq!(client.int_attr("server.port"), Some(8000), "client attr");
    assert_eq!(client.str_attr("server.port"), None, "not a string");
    assert!(client.events.is_empty(), "client span has no events");
    assert_eq!(client.status_code, 2, "client span status error");
    assert_eq!(
        client.status_message, "upstream reset",
        "client span status message"
    );
    assert_eq!(client.resource, service, "client span resource");
    assert_eq!(client.scope_name, "tokenmeter", "client span scope");
}

async fn grpc_client(receiver: &Receiver) -> TraceServiceClient<Channel> {
    tokio::time::timeout(WAIT, TraceServiceClient::connect(receiver.endpoint()))
        .await
        .expect("gRPC connect timed out")
        .expect("gRPC connect")
}

/// One gRPC export with an `authorization` metadata entry.
async fn grpc_export(
    client: &mut TraceServiceClient<Channel>,
) -> Result<ExportTraceServiceResponse, tonic::Status> {
    let mut req = tonic::Request::new(request());
    req.metadata_mut()
        .insert("authorization", "Bearer grpc-secret".parse().unwrap());
    tokio::time::timeout(WAIT, client.export(req))
        .await
        .expect("gRPC export timed out")
        .map(tonic::Response::into_inner)
}

/// [`grpc_export`], tried again while it fails as an OTLP exporter would retry (Cancelled or
/// Unavailable: the connection went away under it), at most five times. The pause between tries
/// is the exporter's backoff, not a wait for anything: the channel reconnects on the next call.
async fn grpc_export_retrying(
    client: &mut TraceServiceClient<Channel>,
) -> Result<ExportTraceServiceResponse, tonic::Status> {
    let mut attempt = 1;
    loop {
        match grpc_export(client).await {
            Err(status)
                if attempt < 5
                    && matches!(
                        status.code(),
                        tonic::Code::Cancelled | tonic::Code::Unavailable
                    ) =>
            {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            result => return result,
        }
    }
}

fn http_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A POST of `body`; the error is the client's (connection refused, reset).
async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    let req = http::Request::post(url)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::AUTHORIZATION, "Bearer http-secret")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = tokio::time::timeout(WAIT, client.request(req))
        .await
        .expect("HTTP POST timed out")
        .map_err(|e| format!("{e:?}"))?;
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(WAIT, body.collect())
        .await
        .expect("HTTP body timed out")
        .map_err(|e| format!("{e:?}"))?
        .to_bytes();
    Ok((parts.status, parts.headers, body))
}

async fn http_export(
    client: &Client<HttpConnector, Full<Bytes>>,
    receiver: &Receiver,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    post(
        client,
        &receiver.traces_url(),
        "application/x-protobuf",
        request().encode_to_vec(),
    )
    .await
}

#[tokio::test]
async fn grpc_export_arrives_intact() {
    let receiver = Receiver::start(Protocol::Grpc).await;
    assert_eq!(
        receiver.endpoint(),
        format!("http://127.0.0.1:{}", receiver.port()),
        "gRPC endpoint"
    );
    let mut client = grpc_client(&receiver).await;
    let response = grpc_export(&mut client)
        .await
        .expect("gRPC export accepted");
    assert_eq!(response.partial_success, None, "full success");

    let spans = receiver.wait_for_spans(2, WAIT).await;
    assert_eq!(spans.len(), 2, "exactly the two spans: {spans:#?}");
    check_spans(&spans, 0);
    assert_eq!(receiver.requests(), 1, "one export request");
    let headers = receiver.headers();
    assert_eq!(headers.len(), 1, "headers of one request");
    assert_eq!(
        headers[0]
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer grpc-secret"),
        "gRPC metadata kept as headers: {:?}",
        headers[0]
    );
}

#[tokio::test]
async fn http_protobuf_export_arrives_intact() {
    let receiver = Receiver::start(Protocol::HttpProtobuf).await;
    assert_eq!(
        receiver.traces_url(),
        format!("http://127.0.0.1:{}/v1/traces", receiver.port()),
        "traces URL"
    );
    let client = http_client();
    let (status, headers, body) = http_export(&client, &receiver).await.expect("HTTP export");
    assert_eq!(status, StatusCode::OK, "export accepted: {body:?}");
    assert_eq!(
        headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        Some("application/x-protobuf"),
        "response content type"
    );
    let response = ExportTraceServiceResponse::decode(body).expect("response is protobuf");
    assert_eq!(response.partial_success, None, "full success");

    let spans = receiver.wait_for_spans(2, WAIT).await;
    assert_eq!(spans.len(), 2, "exactly the two spans: {spans:#?}");
    check_spans(&spans, 0);
    assert_eq!(receiver.requests(), 1, "one export request");
    assert_eq!(
        receiver.headers()[0]
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer http-secret"),
        "request headers kept"
    );

    let (status, _, _) = post(
        &client,
        &receiver.traces_url(),
        "application/json",
        b"{}".to_vec(),
    )
    .await
    .expect("JSON POST answered");
    assert_eq!(
        status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "only protobuf accepted"
    );
    let (status, _, _) = post(
        &client,
        &format!("{}/other", receiver.endpoint()),
        "application/x-protobuf",
        request().encode_to_vec(),
    )
    .await
    .expect("POST /other answered");
    assert_eq!(status, StatusCode::NOT_FOUND, "other paths are not found");
    assert_eq!(
        receiver.requests(),
        1,
        "wrong content types and paths are not export requests"
    );
    assert_eq!(receiver.spans().len(), 2, "nothing more stored");
}

// Multi-threaded, as the proxy's end-to-end tests run: connection tasks on other workers must be
// cut off too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_stop_cuts_connections_and_restart_serves_the_same_port() {
    let mut receiver = Receiver::start(Protocol::Grpc).await;
    let port = receiver.port();
    let mut client = grpc_client(&receiver).await;
    grpc_export(&mut client)
        .await
        .expect("export before stop accepted");
    receiver.wait_for_spans(2, WAIT).await;

    receiver.stop().await;
    assert!(!receiver.is_running(), "stopped");
    // The client's HTTP/2 connection was open: it must have been closed, not left serving.
    // (The code depends on when the client notices: Cancelled "connection closed" if the
    // request raced the close, Unavailable if the channel already reconnected and was refused.)
    let err = grpc_export(&mut client)
        .await
        .expect_err("export on the old connection after stop must fail");
    assert!(
        matches!(
            err.code(),
            tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
        ),
        "old connection after stop: {err:?}"
    );
    let fresh = tokio::time::timeout(WAIT, TraceServiceClient::connect(receiver.endpoint()))
        .await
        .expect("connect after stop timed out");
    assert!(
        fresh.is_err(),
        "a new connection after stop must be refused"
    );
    assert_eq!(receiver.spans().len(), 2, "spans kept across stop");

    receiver.restart().await;
    assert_eq!(receiver.port(), port, "restarted on the same port");
    // The exporter keeps its channel across a collector restart: it must reconnect. Its first
    // export may still find the connection the stop cut (Cancelled, "connection closed") before
    // the channel notices; an exporter retries that, and so does this one, a few times.
    grpc_export_retrying(&mut client)
        .await
        .expect("old channel's export after restart accepted");
    let mut fresh = grpc_client(&receiver).await;
    grpc_export(&mut fresh)
        .await
        .expect("new client's export after restart accepted");
    let spans = receiver.wait_for_spans(6, WAIT).await;
    assert_eq!(spans.len(), 6, "spans accumulate across restart");
    check_spans(&spans, 0);
    check_spans(&spans, 2);
    check_spans(&spans, 4);
    assert_eq!(receiver.requests(), 3, "three accepted exports");
}

#[tokio::test]
async fn http_stop_refuses_and_restart_serves_the_same_port() {
    let mut receiver = Receiver::start(Protocol::HttpProtobuf).await;
    let port = receiver.port();
    let client = http_client();
    let (status, _, _) = http_export(&client, &receiver).await.expect("export");
    assert_eq!(status, StatusCode::OK, "export before stop");

    receiver.stop().await;
    let result = http_export(&client, &receiver).await;
    assert!(
        result.is_err(),
        "export after stop must fail, got {result:?}"
    );

    receiver.restart().await;
    assert_eq!(receiver.port(), port, "restarted on the same port");
    let (status, _, _) = http_export(&client, &receiver)
        .await
        .expect("export after restart");
    assert_eq!(status, StatusCode::OK, "export after restart");
    let spans = receiver.wait_for_spans(4, WAIT).await;
    assert_eq!(
        spans.len(),
        4,
        "the two exports' spans, no more: {spans:#?}"
    );
    check_spans(&spans, 0);
    check_spans(&spans, 2);
    assert_eq!(receiver.requests(), 2, "two exports");
}

#[tokio::test]
async fn refusing_counts_attempts_without_storing() {
    let http = Receiver::start(Protocol::HttpProtobuf).await;
    http.refuse(Some(503));
    let client = http_client();
    let (status, _, _) = http_export(&client, &http).await.expect("refused export");
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "HTTP refusal status"
    );
    assert_eq!(http.requests(), 1, "refused HTTP attempt counted");
    assert_eq!(http.headers().len(), 1, "refused attempt's headers kept");
    assert!(http.spans().is_empty(), "refused HTTP spans not stored");

    let grpc = Receiver::start(Protocol::Grpc).await;
    grpc.refuse(Some(503));
    let mut grpc_client = grpc_client(&grpc).await;
    let err = grpc_export(&mut grpc_client)
        .await
        .expect_err("refused gRPC export fails");
    assert_eq!(
        err.code(),
        tonic::Code::Unavailable,
        "gRPC refusal: {err:?}"
    );
    assert_eq!(grpc.requests(), 1, "refused gRPC attempt counted");
    assert!(grpc.spans().is_empty(), "refused gRPC spans not stored");

    // Accepting again stores the next export.
    http.refuse(None);
    grpc.refuse(None);
    let (status, _, _) = http_export(&client, &http).await.expect("export");
    assert_eq!(status, StatusCode::OK, "HTTP accepted after refusing");
    grpc_export(&mut grpc_client)
        .await
        .expect("gRPC accepted after refusing");
    let (http_spans, grpc_spans) = (
        http.wait_for_spans(2, WAIT).await,
        grpc.wait_for_spans(2, WAIT).await,
    );
    assert_eq!(http_spans.len(), 2, "only the accepted HTTP export's spans");
    assert_eq!(grpc_spans.len(), 2, "only the accepted gRPC export's spans");
    check_spans(&http_spans, 0);
    check_spans(&grpc_spans, 0);
    assert_eq!(http.requests(), 2, "HTTP attempts");
    assert_eq!(grpc.requests(), 2, "gRPC attempts");
}

#[tokio::test]
#[should_panic(expected = "waited")]
async fn waiting_for_missing_spans_panics_with_what_arrived() {
    let receiver = Receiver::start(Protocol::Grpc).await;
    receiver.wait_for_spans(1, Duration::from_millis(50)).await;
}

#[tokio::test]
async fn holding_counts_an_export_on_arrival_and_answers_it_once_released() {
    let http = Receiver::start(Protocol::HttpProtobuf).await;
    let grpc = Receiver::start(Protocol::Grpc).await;
    http.hold(true);
    grpc.hold(true);
    let http_export = {
        let url = http.traces_url();
        tokio::spawn(async move {
            post(
                &http_client(),
                &url,
                "application/x-protobuf",
                request().encode_to_vec(),
            )
            .await
        })
    };
    let mut client = grpc_client(&grpc).await;
    let grpc_export = tokio::spawn(async move { grpc_export(&mut client).await });

    // Each export is in (counted) and held: not answered, nothing stored, for as long as the
    // hold lasts (there is no timer that could release it).
    assert_eq!(
        http.wait_for_requests(1, WAIT).await,
        1,
        "HTTP export counted"
    );
    assert_eq!(
        grpc.wait_for_requests(1, WAIT).await,
        1,
        "gRPC export counted"
    );
    assert!(
        !http_export.is_finished(),
        "a held HTTP export is unanswered"
    );
    assert!(
        !grpc_export.is_finished(),
        "a held gRPC export is unanswered"
    );
    assert!(http.spans().is_empty(), "held HTTP spans not stored yet");
    assert!(grpc.spans().is_empty(), "held gRPC spans not stored yet");
    assert_eq!(http.headers().len(), 1, "the held request's headers kept");

    http.hold(false);
    grpc.hold(false);
    let (status, _, _) = http_export
        .await
        .expect("HTTP export task")
        .expect("HTTP export answered once released");
    assert_eq!(status, StatusCode::OK, "released HTTP export accepted");
    grpc_export
        .await
        .expect("gRPC export task")
        .expect("released gRPC export accepted");
    let (http_spans, grpc_spans) = (
        http.wait_for_spans(2, WAIT).await,
        grpc.wait_for_spans(2, WAIT).await,
    );
    assert_eq!(
        http_spans.len(),
        2,
        "the released HTTP export's spans, once"
    );
    assert_eq!(
        grpc_spans.len(),
        2,
        "the released gRPC export's spans, once"
    );
    check_spans(&http_spans, 0);
    check_spans(&grpc_spans, 0);
    assert_eq!(http.requests(), 1, "one HTTP export, counted once");
    assert_eq!(grpc.requests(), 1, "one gRPC export, counted once");
}
