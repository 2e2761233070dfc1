//! What one HTTP/2 client connection may send before it is an abuse, and the tally against it,
//! whose verdict is an [`Abuse`]: defined here, where it is decided, so that the guard
//! (`h2guard.rs`) uses the budgets and they use nothing of the guard.
//!
//! Frames that cost the server work without being a request — resets, SETTINGS, PINGs,
//! WINDOW_UPDATEs — are counted per connection in fixed windows of [`WINDOW`] (the first starts at
//! the first such frame). A header block (HEADERS and its CONTINUATIONs up to `END_HEADERS`) is
//! checked as it arrives: its frame count and its HPACK bytes.
//!
//! Each budget is wide of what a well-behaved client sends, because tripping one closes the
//! connection and every stream on it; the reasons are on each constant. The two that follow the
//! data a client receives (PING for BDP estimation, WINDOW_UPDATE to reopen flow-control windows)
//! also earn allowance from the bytes the proxy wrote to the connection in the window, so a long
//! or fast download can never run out; a flood without downloads still does, and a PING's own
//! PONG (17 bytes) earns back only part of one.
use std::io;
use std::time::Duration;

use tokio::time::Instant;

use super::frames::{
    FrameHead, CONTINUATION, FLAG_ACK, FLAG_END_HEADERS, HEADERS, PING, RST_STREAM, SETTINGS,
    WINDOW_UPDATE,
};

/// Which budget a connection exceeded (the `kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abuse {
    RapidReset,
    ContinuationFlood,
    SettingsFlood,
    PingFlood,
    WindowUpdateFlood,
    HeaderListTooLarge,
}

impl Abuse {
    pub const ALL: [Abuse; 6] = [
        Abuse::RapidReset,
        Abuse::ContinuationFlood,
        Abuse::SettingsFlood,
        Abuse::PingFlood,
        Abuse::WindowUpdateFlood,
        Abuse::HeaderListTooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Abuse::RapidReset => "rapid_reset",
            Abuse::ContinuationFlood => "continuation_flood",
            Abuse::SettingsFlood => "settings_flood",
            Abuse::PingFlood => "ping_flood",
            Abuse::WindowUpdateFlood => "window_update_flood",
            Abuse::HeaderListTooLarge => "header_list_too_large",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Abuse::RapidReset => "too many RST_STREAM frames",
            Abuse::ContinuationFlood => "too many CONTINUATION frames in one header block",
            Abuse::SettingsFlood => "too many SETTINGS frames",
            Abuse::PingFlood => "too many PING frames",
            Abuse::WindowUpdateFlood => "too many WINDOW_UPDATE frames",
            Abuse::HeaderListTooLarge => "a header block over server.max_header_bytes",
        }
    }

    /// The error the guard's read returns: hyper ends the connection with it.
    pub(super) fn error(self) -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("HTTP/2 abuse {}: {}", self.as_str(), self.what()),
        )
    }
}

/// The counting window of the per-window budgets.
pub const WINDOW: Duration = Duration::from_secs(10);

/// RST_STREAM frames per window (rapid reset, CVE-2023-44487: open a stream, reset it at once,
/// repeat, so the server starts work the client never waits for). A client resets a stream only
/// when it gives up on it (a user pressing stop, a timeout); 20 cancellations a second on one
/// connection, sustained for 10 s, is far past any interactive or batch client. hyper's own
/// `max_pending_accept_reset_streams` is set to the same number, so this counted guard is the one
/// that trips.
pub const RESETS_PER_WINDOW: u32 = 200;

/// Non-ACK SETTINGS frames per window. A client sends one after its preface and, when it tunes
/// its receive window from measured bandwidth (hyper's adaptive window), one per change: a handful
/// per connection. Each costs the server a SETTINGS ACK and re-applies every setting.
pub const SETTINGS_PER_WINDOW: u32 = 100;

/// Non-ACK PING frames per window, before any earned from data written. Keep-alive pings come at
/// most about once a second; BDP pings (hyper, gRPC) at most one per round trip while data
/// arrives, backing off once the window is stable.
pub const PINGS_PER_WINDOW: u32 = 1000;

/// One more PING allowed per this many bytes the proxy wrote in the window: a BDP pinger sends at
/// most one per DATA frame it receives, and the smallest token event frame is about 60 bytes.
pub const WRITTEN_BYTES_PER_PING: u64 = 32;

/// WINDOW_UPDATE frames per window, before any earned from data written. Clients send them as
/// they consume what they receive, typically one per half window (32 KiB by default), on the
/// stream and on the connection.
pub(crate) const WINDOW_UPDATES_PER_WINDOW: u32 = 1000;

/// One more WINDOW_UPDATE allowed per this many bytes the proxy wrote in the window: even a client
/// that answered every DATA frame (at least 10 bytes with its head) on both the stream and the
/// connection would send one per 5 bytes of the smallest frames, and one per 30 of token events.
pub(crate) const WRITTEN_BYTES_PER_WINDOW_UPDATE: u64 = 16;

/// The smallest frame size a server may advertise (RFC 9113 §6.5.2), and hyper's: a client fills
/// header frames up to it.
const MAX_FRAME_SIZE: usize = 16_384;

/// The budgets of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    pub window: Duration,
    pub resets: u32,
    pub settings: u32,
    pub pings: u32,
    pub written_bytes_per_ping: u64,
    pub window_updates: u32,
    pub written_bytes_per_window_update: u64,
    /// CONTINUATION frames without `END_HEADERS` in one header block.
    pub continuations: u32,
    /// HPACK bytes (frame payloads) in one header block.
    pub header_block_bytes: u64,
}

impl Budgets {
    /// The budgets for a server whose header lists may be `max_header_bytes` long
    /// (`server.max_header_bytes`, also hyper's `max_header_list_size`).
    ///
    /// A header block over `max_header_bytes` of HPACK decodes to more than that (a field costs at
    /// most 7 bytes of framing in HPACK, 32 in the decoded size), so hyper would refuse it; the
    /// guard closes the connection instead, as hyper does for an HTTP/1 head over the limit. The
    /// CONTINUATION budget is h2's own formula — the frames needed to carry `max_header_bytes` at
    /// the minimum frame size, plus a quarter, at least 5 — so the guard cuts exactly the blocks h2
    /// would, but counted.
    pub fn for_server(max_header_bytes: usize) -> Self {
        let frames = (max_header_bytes / MAX_FRAME_SIZE).max(1);
        let continuations = frames.saturating_add(frames / 4).max(5);
        Self {
            window: WINDOW,
            resets: RESETS_PER_WINDOW,
            settings: SETTINGS_PER_WINDOW,
            pings: PINGS_PER_WINDOW,
            written_bytes_per_ping: WRITTEN_BYTES_PER_PING,
            window_updates: WINDOW_UPDATES_PER_WINDOW,
            written_bytes_per_window_update: WRITTEN_BYTES_PER_WINDOW_UPDATE,
            continuations: u32::try_from(continuations).unwrap_or(u32::MAX),
            header_block_bytes: u64::try_from(max_header_bytes).unwrap_or(u64::MAX),
        }
    }
}

/// A header block still waiting for `END_HEADERS`.
#[derive(Debug, Clone, Copy)]
struct Block {
    continuations: u32,
    bytes: u64,
}

/// One connection's counts against its [`Budgets`].
#[derive(Debug, Clone)]
pub struct Tally {
    budgets: Budgets,
    window_started: Option<Instant>,
    resets: u32,
    settings: u32,
    pings: u32,
    window_updates: u32,
    /// Bytes the proxy wrote to the client in this window.
    written: u64,
    block: Option<Block>,
}

impl Tally {
    pub fn new(budgets: Budgets) -> Self {
        Self {
            budgets,
            window_started: None,
            resets: 0,
            settings: 0,
            pings: 0,
            window_updates: 0,
            written: 0,
            block: None,
        }
    }

    /// The proxy wrote `n` bytes to the client.
    pub fn wrote(&mut self, n: usize) {
        self.written = self
            .written
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
    }

    /// Counts one frame head; `Err` names the budget it exceeded. `now` is asked only for the
    /// frames counted per window.
    pub fn frame(
        &mut self,
        head: FrameHead,
        now: &mut impl FnMut() -> Instant,
    ) -> Result<(), Abuse> {
        let b = self.budgets;
        match head.kind {
            HEADERS => self.header_block_starts(head),
            CONTINUATION => self.header_block_continues(head),
            RST_STREAM => {
                self.roll(now());
                count_one(&mut self.resets, b.resets.into(), Abuse::RapidReset)
            }
            SETTINGS if !head.has(FLAG_ACK) => {
                self.roll(now());
                count_one(&mut self.settings, b.settings.into(), Abuse::SettingsFlood)
            }
            PING if !head.has(FLAG_ACK) => {
                self.roll(now());
                let earned = self.written / b.written_bytes_per_ping;
                let allowed = u64::from(b.pings) + earned;
                count_one(&mut self.pings, allowed, Abuse::PingFlood)
            }
            WINDOW_UPDATE => {
                self.roll(now());
                let earned = self.written / b.written_bytes_per_window_update;
                let allowed = u64::from(b.window_updates) + earned;
                count_one(&mut self.window_updates, allowed, Abuse::WindowUpdateFlood)
            }
            _ => Ok(()),
        }
    }

    fn header_block_starts(&mut self, head: FrameHead) -> Result<(), Abuse> {
        let bytes = u64::from(head.length);
        check(
            bytes <= self.budgets.header_block_bytes,
            Abuse::HeaderListTooLarge,
        )?;
        self.block = (!head.has(FLAG_END_HEADERS)).then_some(Block {
            continuations: 0,
            bytes,
        });
        Ok(())
    }

    fn header_block_continues(&mut self, head: FrameHead) -> Result<(), Abuse> {
        // A CONTINUATION outside a block is a protocol error h2 closes the connection for.
        let Some(block) = &mut self.block else {
            return Ok(());
        };
        block.bytes = block.bytes.saturating_add(u64::from(head.length));
        check(
            block.bytes <= self.budgets.header_block_bytes,
            Abuse::HeaderListTooLarge,
        )?;
        if head.has(FLAG_END_HEADERS) {
            self.block = None;
            return Ok(());
        }
        block.continuations = block.continuations.saturating_add(1);
        check(
            block.continuations <= self.budgets.continuations,
            Abuse::ContinuationFlood,
        )
    }

    /// Starts a new window once the current one is over (the first at the first counted frame).
    fn roll(&mut self, now: Instant) {
        match self.window_started {
            Some(started) if now.duration_since(started) < self.budgets.window => {}
            Some(_) => {
                self.window_started = Some(now);
                self.resets = 0;
                self.settings = 0;
                self.pings = 0;
                self.window_updates = 0;
                self.written = 0;
            }
            None => self.window_started = Some(now),
        }
    }
}

/// Counts one more frame of a kind budgeted per window: past `allowed` in the window, `abuse`.
fn count_one(count: &mut u32, allowed: u64, abuse: Abuse) -> Result<(), Abuse> {
    *count = count.saturating_add(1);
    check(u64::from(*count) <= allowed, abuse)
}

fn check(within: bool, abuse: Abuse) -> Result<(), Abuse> {
    if within {
        Ok(())
    } else {
        Err(abuse)
    }
}

#[cfg(test)]
mod tests;
