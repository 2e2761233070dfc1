//! Removing the usage-only chunk that usage injection made the backend send.
//!
//! When the proxy added `stream_options.include_usage` for a client that did not ask for it, the
//! backend sends one extra event (`"choices": []` with `usage`). The client must not see it: it
//! receives byte for byte what the backend would have sent without the injection.
//!
//! Frames that hold only whole events and no usage chunk pass through as the very same `Bytes`
//! (vLLM writes one event per frame, so that is every frame of a vLLM stream but the usage one).
//! A frame that ends inside an event keeps that partial event back until the event is complete:
//! until then nobody can know whether it is the usage chunk, and an SSE client cannot act on a
//! partial event anyway. So re-framing happens only to streams whose backend splits events across
//! frames, and only for requests whose usage the proxy injected.
use bytes::{Bytes, BytesMut};

/// A byte span `[start, end)` of the stream, in stream offsets.
pub type Span = (u64, u64);

/// Strips usage-only events from one stream.
#[derive(Debug, Default)]
pub struct UsageStripper {
    /// Bytes of an event still open at the end of the previous frame, starting at `held_start`.
    held: BytesMut,
    held_start: u64,
    /// A stripped event ended with a CR as the frame's last byte: an LF starting the next frame
    /// completes that CRLF and goes too.
    drop_lf_at: Option<u64>,
}

impl UsageStripper {
    /// Processes one frame covering stream offsets `[frame_start, frame_start + len)`. `cuts` are the
    /// spans of usage-only events the scanner dispatched in this frame (ascending), `boundary` the
    /// scanner's block start after the frame (everything before it is whole events). Returns what to
    /// forward now, or `None` when nothing is ready.
    pub fn process(
        &mut self,
        frame: Bytes,
        frame_start: u64,
        cuts: &[Span],
        boundary: u64,
    ) -> Option<Bytes> {
        if frame.is_empty() {
            return None;
        }
        let frame_end = frame_start + frame.len() as u64;
        let lf_owed = self.drop_lf_at == Some(frame_start);
        self.drop_lf_at = None;
        if self.held.is_empty() && cuts.is_empty() && boundary == frame_end && !lf_owed {
            return Some(frame);
        }
        // Work on one contiguous buffer of everything not yet forwarded.
        let (start, buffer) = if self.held.is_empty() {
            (frame_start, frame)
        } else {
            self.held.extend_from_slice(&frame);
            (self.held_start, std::mem::take(&mut self.held).freeze())
        };
        let byte_at = |offset: u64| buffer.get((offset - start) as usize).copied();
        let mut out = BytesMut::new();
        let mut cursor = start;
        if lf_owed && byte_at(frame_start) == Some(b'\n') {
            // The LF belongs to the stripped event's CRLF: skip it by emitting around it.
            out.extend_from_slice(&buffer[..(frame_start - start) as usize]);
            cursor = frame_start + 1;
        }
        for &(cut_start, cut_end) in cuts {
            let cut_start = cut_start.max(cursor);
            let mut cut_end = cut_end.max(cut_start);
            if cut_end > cut_start && byte_at(cut_end - 1) == Some(b'\r') {
                if cut_end == frame_end {
                    self.drop_lf_at = Some(cut_end);
                } else if byte_at(cut_end) == Some(b'\n') {
                    cut_end += 1;
                }
            }
            out.extend_from_slice(&buffer[(cursor - start) as usize..(cut_start - start) as usize]);
            cursor = cut_end;
        }
        let ready_end = boundary.clamp(cursor, frame_end);
        out.extend_from_slice(&buffer[(cursor - start) as usize..(ready_end - start) as usize]);
        if ready_end < frame_end {
            self.held_start = ready_end;
            self.held
                .extend_from_slice(&buffer[(ready_end - start) as usize..]);
        }
        (!out.is_empty()).then(|| out.freeze())
    }

    /// At the end of the stream: what is still held (an unterminated last event), to forward as is.
    pub fn finish(&mut self) -> Option<Bytes> {
        (!self.held.is_empty()).then(|| std::mem::take(&mut self.held).freeze())
    }
}

#[cfg(test)]
mod tests;
