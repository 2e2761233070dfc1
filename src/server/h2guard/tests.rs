use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::frames::{FrameHead, PING, RST_STREAM, SETTINGS, WINDOW_UPDATE};
use super::*;
use crate::config::Config;
use crate::server::smuggling::scan::H2_PREFACE;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("small");
    let mut bytes = FrameHead {
        length,
        kind,
        flags,
        stream,
    }
    .encode()
    .to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

fn abuse_count(metrics: &Metrics, kind: &str) -> u64 {
    let line = format!("tokenmeter_http2_abuse_total{{kind=\"{kind}\"}} ");
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()).and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| panic!("no {line} series"))
}

/// A guard over one end of an in-memory pipe; the client writes to the other end.
fn guarded(metrics: &Metrics) -> (H2Guard<tokio::io::DuplexStream>, tokio::io::DuplexStream) {
    let (server, client) = tokio::io::duplex(1 << 20);
    let counters = Arc::new(AbuseCounters::new(metrics));
    (
        H2Guard::new(server, Budgets::for_server(65_536), counters),
        client,
    )
}

/// Reads everything the guard lets through until it fails or the client closed.
async fn read_all(guard: &mut H2Guard<tokio::io::DuplexStream>) -> (Vec<u8>, io::Result<()>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match guard.read(&mut buf).await {
            Ok(0) => return (got, Ok(())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(err) => return (got, Err(err)),
        }
    }
}

/// What a fresh guard lets through of `bytes`, which a client sends whole and then closes; and
/// the guard, to read from again.
async fn send(
    metrics: &Metrics,
    bytes: &[u8],
) -> (Vec<u8>, io::Result<()>, H2Guard<tokio::io::DuplexStream>) {
    let (mut guard, mut client) = guarded(metrics);
    client.write_all(bytes).await.expect("write");
    drop(client);
    let (got, result) = read_all(&mut guard).await;
    (got, result, guard)
}

/// Sends `bytes` through a fresh guard: none is refused, and all pass unchanged.
async fn assert_passes(bytes: &[u8], why: &str) {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let (got, result, _) = send(&metrics, bytes).await;
    assert!(result.is_ok(), "{why}: {result:?}");
    assert_eq!(got, bytes, "{why}: every byte through, unchanged");
}

#[test]
fn every_kind_is_exposed_from_zero() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let _counters = AbuseCounters::new(&metrics);
    for abuse in Abuse::ALL {
        assert_eq!(
            abuse_count(&metrics, abuse.as_str()),
            0,
            "{abuse:?} at 0 before any connection"
        );
    }
    assert!(
        metrics
            .render()
            .contains("# TYPE tokenmeter_http2_abuse_total counter"),
        "a counter family"
    );
}

#[tokio::test]
async fn a_flood_fails_the_read_and_is_counted_once() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let mut bytes = H2_PREFACE.to_vec();
    bytes.extend(frame(SETTINGS, 0, 0, &[]));
    for _ in 0..1000 {
        bytes.extend(frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    }
    let (got, result, mut guard) = send(&metrics, &bytes).await;
    let err = result.expect_err("the guard ends the connection");
    assert_eq!(
        err.kind(),
        io::ErrorKind::ConnectionAborted,
        "aborted: {err}"
    );
    assert!(
        err.to_string().contains("rapid_reset"),
        "names the abuse: {err}"
    );
    let passed_resets = got.len().saturating_sub(H2_PREFACE.len() + 9) / 13;
    assert!(
        passed_resets <= 200,
        "no more than the budget reached hyper: {passed_resets}"
    );
    let again = guard.read(&mut [0u8; 16]).await;
    assert!(again.is_err(), "a tripped guard stays tripped");
    assert_eq!(
        abuse_count(&metrics, "rapid_reset"),
        1,
        "counted once per connection"
    );
    for other in Abuse::ALL.iter().filter(|a| **a != Abuse::RapidReset) {
        assert_eq!(
            abuse_count(&metrics, other.as_str()),
            0,
            "{other:?} untouched"
        );
    }
}

#[tokio::test]
async fn a_well_behaved_stream_passes_unchanged() {
    let mut bytes = H2_PREFACE.to_vec();
    bytes.extend(frame(SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0]));
    bytes.extend(frame(SETTINGS, 1, 0, &[]));
    for i in 0..50u8 {
        bytes.extend(frame(PING, 0, 0, &[i; 8]));
        bytes.extend(frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
    }
    assert_passes(&bytes, "not an abuse").await;
}

#[tokio::test]
async fn http1_passes_through_untouched() {
    // Looks like a flood of RST_STREAM frames, but after an HTTP/1 request line.
    let mut bytes = b"POST / HTTP/1.1\r\nhost: x\r\n\r\n".to_vec();
    for _ in 0..1000 {
        bytes.extend(frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    }
    assert_passes(&bytes, "HTTP/1 is not scanned").await;
}

#[tokio::test]
async fn bytes_written_to_the_client_earn_window_updates() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let (mut guard, mut client) = guarded(&metrics);
    let budgets = Budgets::for_server(65_536);
    let response = vec![0u8; 64 * 1024];
    let reader = tokio::spawn(async move {
        let mut sink = vec![0u8; response.len()];
        client
            .read_exact(&mut sink)
            .await
            .expect("the client reads the response");
        let mut bytes = H2_PREFACE.to_vec();
        // More than the base budget, fewer than the base plus what 64 KiB earns.
        for _ in 0..budgets.window_updates + 2000 {
            bytes.extend(frame(WINDOW_UPDATE, 0, 1, &[0, 0, 0, 1]));
        }
        client.write_all(&bytes).await.expect("write");
        drop(client);
        bytes
    });
    guard
        .write_all(&[0u8; 64 * 1024])
        .await
        .expect("the proxy writes 64 KiB");
    let (got, result) = read_all(&mut guard).await;
    assert!(result.is_ok(), "earned by the data written: {result:?}");
    assert_eq!(got, reader.await.expect("client"), "every byte through");
}
