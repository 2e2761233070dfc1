//! What the budget tests share: a streamed chat request as a tenant, whose reservation is known
//! (`max_tokens` 10, counting output), and the usage its client read back.
use std::net::SocketAddr;
use std::time::Duration;

use tokenmeter::config::{Counts, Limits};

use super::client::{open_with, Protocol, Streamed};

pub const CHAT: &str = "/v1/chat/completions";
/// A streamed chat asking for its usage, reserving [`RESERVATION`] output tokens.
pub const BODY: &str = r#"{"model":"m1","stream":true,"stream_options":{"include_usage":true},"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
/// What [`BODY`] reserves under a budget that counts output: its `max_tokens`.
pub const RESERVATION: u64 = 10;

/// Limits of `limit` output tokens a day.
pub fn output_per_day(limit: u64) -> Limits {
    Limits {
        counts: Counts::Output,
        tokens_per_day: Some(limit),
        ..Limits::default()
    }
}

/// Sends [`BODY`] as `tenant` (the `x-tenant-id` header) and reads the whole answer; panics if it
/// took longer than `within`, which each test sets from what its request may wait for.
pub async fn send_as(addr: SocketAddr, tenant: &str, within: Duration) -> Streamed {
    let request = async {
        open_with(
            addr,
            Protocol::Http1,
            "POST",
            CHAT,
            BODY,
            &[("x-tenant-id", tenant)],
        )
        .await
        .collect()
        .await
    };
    tokio::time::timeout(within, request)
        .await
        .unwrap_or_else(|_| panic!("the request was answered within {within:?}"))
}

/// The completion tokens the client's own usage chunk reports.
pub fn completion_tokens(streamed: &Streamed) -> u64 {
    let text = streamed.text();
    let at = text
        .rfind("\"completion_tokens\":")
        .expect("the stream carries usage");
    text[at + "\"completion_tokens\":".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .expect("a number")
}
