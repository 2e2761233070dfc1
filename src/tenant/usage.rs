//! Usage records: one JSON line per finished request, written off the token path.
//!
//! The finish hook ([`UsageHook`]) turns a finished request into a line and offers it to a bounded
//! queue: when `tenants.usage.queue_records` lines are already waiting, the line is dropped and
//! counted, never waited for. One thread writes the lines (a file is blocking I/O: it has no place
//! on the runtime's workers), flushes at least every `flush_interval` (a crash loses at most that
//! much), and rotates the file by size: `path` becomes `path.1`, `path.1` becomes `path.2`, up to
//! `keep_files`. A write that fails (a full disk) drops its record, counted, and the next one tries
//! again. At shutdown the server closes the log after every request has ended: every finished
//! request's record is on disk before the process exits.
//!
//! A record's tokens are the ones every series counts ([`Finished::counted_tokens`]), so the
//! records of a tenant sum to its counters, to the token.
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use metrics::{Counter, Label};
use serde::Serialize;

use crate::config::UsageConfig;
use crate::context::finish::{FinishHook, Finished};
use crate::metrics::Metrics;

/// Records written.
pub(crate) const RECORDS: &str = "tokenmeter_usage_records_total";
/// Records lost, by `reason`: `queue_full`, `write_failed`, `closed` (finished after the log
/// closed).
pub(crate) const RECORDS_DROPPED: &str = "tokenmeter_usage_records_dropped_total";

/// One finished request, as its line says it.
#[derive(Debug, Serialize)]
pub(crate) struct UsageRecord<'a> {
    /// When it ended (RFC 3339, UTC, milliseconds).
    pub time: String,
    pub trace_id: Option<String>,
    pub tenant: Option<&'a str>,
    pub model: Option<&'a str>,
    pub pool: Option<&'a str>,
    pub backend: Option<&'a str>,
    pub status: Option<u16>,
    pub outcome: &'static str,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: f64,
}

impl<'a> UsageRecord<'a> {
    pub fn of(done: &'a Finished<'a>, now: SystemTime) -> Self {
        let context = done.context;
        let figures = &done.figures;
        let (input, output) = done.counted_tokens();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Self {
            time: humantime::format_rfc3339_millis(now).to_string(),
            trace_id: context.trace.as_ref().map(|trace| trace.hex()),
            tenant: context
                .tenant
                .as_ref()
                .and_then(|tenant| tenant.name.as_deref()),
            model: context.request.model.as_deref(),
            pool: context.route.pool.as_deref(),
            backend: context.route.backend.as_ref().map(|target| &*target.label),
            status: context.status.map(|status| status.as_u16()),
            outcome: done.outcome.as_str(),
            input_tokens: input,
            output_tokens: output,
            cached_tokens: figures.cached_input_tokens,
            ttft_ms: figures.ttft.map(ms),
            tpot_ms: figures.tpot.map(ms),
            e2e_ms: ms(figures.e2e),
        }
    }
}

/// What the writer is sent.
enum Message {
    Line(String),
    /// Flush, answer, and stop.
    Close(mpsc::Sender<()>),
}

/// The queue side of the usage log.
pub(crate) struct UsageLog {
    tx: SyncSender<Message>,
    written: Counter,
    /// By reason: queue_full, write_failed, closed.
    dropped: [Counter; 3],
}

impl std::fmt::Debug for UsageLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageLog").finish_non_exhaustive()
    }
}

/// Where lines go.
enum Sink {
    Stdout(std::io::Stdout),
    File {
        path: PathBuf,
        out: BufWriter<File>,
        bytes: u64,
    },
}

impl UsageLog {
    /// Opens `config.path` (appending) and starts the writer; the error names the key.
    pub fn start(config: &UsageConfig, metrics: &Metrics) -> Result<Arc<Self>, String> {
        metrics.describe_counter(RECORDS, "Usage records written.");
        metrics.describe_counter(
            RECORDS_DROPPED,
            "Usage records lost, by reason: queue_full, write_failed, closed.",
        );
        let path = config.path.trim();
        let sink = if path == "-" {
            Sink::Stdout(std::io::stdout())
        } else {
            let path = PathBuf::from(path);
            let file = open(&path)
                .map_err(|err| format!("tenants.usage.path {}: {err}", path.display()))?;
            let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
            Sink::File {
                path,
                out: BufWriter::new(file),
                bytes,
            }
        };
        let (tx, rx) = mpsc::sync_channel(config.queue_records);
        let dropped = ["queue_full", "write_failed", "closed"]
            .map(|reason| metrics.counter(RECORDS_DROPPED, vec![Label::new("reason", reason)]));
        let log = Arc::new(Self {
            tx,
            written: metrics.counter(RECORDS, Vec::new()),
            dropped,
        });
        let writer = Writer {
            sink,
            rx,
            max_bytes: config.max_file_bytes,
            keep: config.keep_files,
            flush_every: config.flush_interval,
            written: log.written.clone(),
            write_failed: log.dropped[1].clone(),
        };
        std::thread::Builder::new()
            .name("usage-records".to_owned())
            .spawn(move || writer.run())
            .map_err(|err| format!("tenants.usage: cannot start the writer: {err}"))?;
        Ok(log)
    }

    /// What [`UsageLog::start`] would refuse, without writing (`serve --check`): an existing file
    /// is opened for appending (and closed), a missing one needs its directory; the error names
    /// the key. (Whether the directory lets a file be created is known only by creating one.)
    pub fn check(config: &UsageConfig) -> Result<(), String> {
        let path = config.path.trim();
        if path == "-" {
            return Ok(());
        }
        let path = std::path::Path::new(path);
        let named = |err: std::io::Error| format!("tenants.usage.path {}: {err}", path.display());
        match OpenOptions::new().append(true).open(path) {
            Ok(_) => Ok(()),
            // Not there: start would create it, in a directory that must be there.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let dir = match path.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => std::path::Path::new("."),
                };
                std::fs::metadata(dir).map(drop).map_err(named)
            }
            Err(err) => Err(named(err)),
        }
    }

    /// Queues a line, or drops and counts it when the queue is full. Never waits.
    pub fn offer(&self, line: String) {
        match self.tx.try_send(Message::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.dropped[0].increment(1),
            Err(TrySendError::Disconnected(_)) => self.dropped[2].increment(1),
        }
    }

    /// Writes everything queued and stops the writer, waiting at most `timeout`: for a process
    /// that is stopping, once every request has ended.
    pub fn close(&self, timeout: Duration) {
        let (done, answered) = mpsc::channel();
        let deadline = std::time::Instant::now() + timeout;
        let mut message = Message::Close(done);
        loop {
            match self.tx.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if std::time::Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let _ = answered.recv_timeout(left);
    }
}

fn open(path: &std::path::Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The writer thread.
struct Writer {
    sink: Sink,
    rx: Receiver<Message>,
    max_bytes: u64,
    keep: u32,
    flush_every: Duration,
    written: Counter,
    write_failed: Counter,
}

impl Writer {
    fn run(mut self) {
        loop {
            match self.rx.recv_timeout(self.flush_every) {
                Ok(Message::Line(line)) => self.write(&line),
                Ok(Message::Close(done)) => {
                    while let Ok(Message::Line(line)) = self.rx.try_recv() {
                        self.write(&line);
                    }
                    self.flush();
                    let _ = done.send(());
                    return;
                }
                Err(RecvTimeoutError::Timeout) => self.flush(),
                Err(RecvTimeoutError::Disconnected) => {
                    self.flush();
                    return;
                }
            }
        }
    }

    fn write(&mut self, line: &str) {
        let result = match &mut self.sink {
            Sink::Stdout(out) => writeln!(out, "{line}"),
            Sink::File { out, bytes, .. } => {
                let result = writeln!(out, "{line}");
                if result.is_ok() {
                    *bytes += line.len() as u64 + 1;
                }
                result
            }
        };
        match result {
            Ok(()) => self.written.increment(1),
            Err(err) => {
                tracing::warn!(error = %err, "usage record not written: dropped");
                self.write_failed.increment(1);
            }
        }
        if matches!(&self.sink, Sink::File { bytes, .. } if *bytes >= self.max_bytes) {
            self.rotate();
        }
    }

    fn flush(&mut self) {
        let result = match &mut self.sink {
            Sink::Stdout(out) => out.flush(),
            Sink::File { out, .. } => out.flush(),
        };
        if let Err(err) = result {
            tracing::warn!(error = %err, "usage records not flushed");
        }
    }

    /// `path` → `path.1` → ... → `path.keep` (the oldest removed), and a new `path`.
    fn rotate(&mut self) {
        self.flush();
        let Sink::File { path, out, bytes } = &mut self.sink else {
            return;
        };
        let numbered = |n: u32| {
            let mut name = path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.keep > 0 {
            for n in (1..self.keep).rev() {
                let _ = std::fs::rename(numbered(n), numbered(n + 1));
            }
            let _ = std::fs::rename(&*path, numbered(1));
        } else {
            let _ = std::fs::remove_file(&*path);
        }
        match open(path) {
            Ok(file) => {
                *out = BufWriter::new(file);
                *bytes = 0;
            }
            Err(err) => tracing::warn!(error = %err, "usage records: cannot open a new file"),
        }
    }
}

/// The finish hook: a line per finished request.
#[derive(Debug)]
pub(crate) struct UsageHook {
    log: Arc<UsageLog>,
}

impl UsageHook {
    pub fn new(log: Arc<UsageLog>) -> Self {
        Self { log }
    }
}

impl FinishHook for UsageHook {
    fn finished(&self, done: &Finished<'_>) {
        let record = UsageRecord::of(done, SystemTime::now());
        match serde_json::to_string(&record) {
            Ok(line) => self.log.offer(line),
            Err(err) => tracing::warn!(error = %err, "usage record not serialised"),
        }
    }
}

#[cfg(test)]
mod tests;
