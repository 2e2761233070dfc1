//! The socket wrapper that shows every byte the client sends to a [`FramingScanner`] on its way
//! to hyper (a [`Watched`] socket). Reads are passed through unchanged; writes are not looked at.
use std::io;
use std::sync::Arc;

use super::super::watched::{Watch, Watched};
use super::{ConnectionFraming, FramingScanner};

/// An accepted connection whose request framing is followed (see the module docs).
pub type GuardedStream<T> = Watched<T, FramingWatch>;

/// The scanner of one connection's requests, and where it flags a conflicting one.
#[derive(Debug)]
pub struct FramingWatch {
    scanner: FramingScanner,
    shared: Arc<ConnectionFraming>,
}

impl<T> GuardedStream<T> {
    /// Wraps `inner`; heads over `max_head` bytes are not followed (hyper refuses them anyway).
    pub fn new(inner: T, shared: Arc<ConnectionFraming>, max_head: usize) -> Self {
        let scanner = FramingScanner::new(max_head);
        Watched::with(inner, FramingWatch { scanner, shared })
    }
}

impl Watch for FramingWatch {
    fn read(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.scanner.active() {
            self.scanner.feed(bytes);
            if let Some(index) = self.scanner.conflicting() {
                self.shared.flag(index);
            }
        }
        Ok(())
    }
}
