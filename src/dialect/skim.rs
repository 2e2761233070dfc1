//! A strict, single-pass JSON skimmer: the fast path of the per-event classifiers.
//!
//! Long on purpose: one hand-written JSON lexer; its fast path must stay in one place to stay
//! exactly as strict as the serde walk it stands in for.
//!
//! Why: the serde walk ([`super::walk`]) costs ~730 ns for a 230-byte vLLM chunk, most of it
//! serde's generic machinery (key enums, `RawValue` borrowing, visitor dispatch) spent on members
//! the meter never reads. A classifier built on [`Skim`] validates the same bytes and looks only at
//! the members it needs, in one forward pass that allocates nothing.
//!
//! The contract that makes it safe to use in front of the serde walk: every method returns `None`
//! ("not sure") for anything outside a conservative subset of JSON, and the caller then falls back
//! to the full parse. The subset is chosen so that whatever the skimmer accepts, serde_json
//! accepts with the same meaning:
//! - the input is valid UTF-8 (each string is checked as it is read; outside strings the grammar
//!   allows ASCII only), as when serde_json reads a `&str`;
//! - the grammar is RFC 8259's, as strict as serde_json's (no trailing commas, no leading zeros,
//!   no control characters in strings, only the eight short escapes and `\uXXXX`);
//! - a `\u` escape of a surrogate (`D800`-`DFFF`) is not accepted, so the difference between
//!   serde_json's checked and unchecked unescaping never matters;
//! - a member name with any escape is not accepted (serde_json unescapes names before matching
//!   them; the skimmer matches raw bytes);
//! - nesting deeper than [`MAX_DEPTH`] is not accepted (serde_json's limit is 128).
//!
//! `tests/e2e/dialect_skim.rs` checks the contract differentially: on every fixture and on random and
//! adversarial JSON, whatever a fast classifier returns equals what the serde walk returns.

/// Containers nested deeper than this are left to serde_json (whose own limit is 128, so the
/// skimmer never accepts what serde_json would refuse for depth).
pub(crate) const MAX_DEPTH: u32 = 64;

/// Bytes that end or interrupt the plain run of a string: the quote, the backslash and the
/// control characters serde_json refuses inside strings.
const STRING_STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// A cursor over one JSON document. Every method that reads returns `None` when the input leaves
/// the accepted subset (module docs); the caller then abandons the skim.
///
/// Between calls the cursor sits on the first byte of the next value or structural character,
/// never on whitespace, so each byte is looked at once.
pub(crate) struct Skim<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: u32,
}

/// What a string read found: its raw (still escaped) content, without the quotes.
#[derive(Clone, Copy)]
pub(crate) struct RawStr<'a> {
    pub(crate) raw: &'a [u8],
    pub(crate) escaped: bool,
}

impl<'a> Skim<'a> {
    /// A skimmer over `bytes`. Strings are checked to be UTF-8 as they are read (the structure
    /// outside them is ASCII by the grammar), so the whole input is UTF-8 whenever a read
    /// succeeds, as it is when serde_json reads it from a `&str`.
    pub(crate) fn new(bytes: &'a [u8]) -> Skim<'a> {
        let mut skim = Skim {
            bytes,
            pos: 0,
            depth: 0,
        };
        skim.skip_ws();
        skim
    }

    #[inline(always)]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// The first byte of the next value, not consumed.
    #[inline(always)]
    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Nothing but whitespace is left (serde_json's `end()`).
    pub(crate) fn finish(self) -> Option<()> {
        (self.pos == self.bytes.len()).then_some(())
    }

    #[inline(always)]
    fn enter(&mut self, open: u8) -> Option<()> {
        if self.peek()? != open || self.depth >= MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        self.depth += 1;
        self.skip_ws();
        Some(())
    }

    /// Consumes `{`; the members follow through [`Skim::next_member`].
    pub(crate) fn enter_object(&mut self) -> Option<()> {
        self.enter(b'{')
    }

    /// Consumes `[`; the elements follow through [`Skim::next_element`].
    pub(crate) fn enter_array(&mut self) -> Option<()> {
        self.enter(b'[')
    }

    /// The next member name of the object being read, positioned at its value; `Some(None)` once
    /// the closing `}` is consumed. `first` is true for the first call on an object (no comma
    /// before it) and is cleared here. Names with escapes are not accepted (module docs).
    #[inline]
    pub(crate) fn next_member(&mut self, first: &mut bool) -> Option<Option<&'a [u8]>> {
        match self.next_name(first)? {
            Some(name) if name.escaped => None,
            Some(name) => Some(Some(name.raw)),
            None => Some(None),
        }
    }

    /// As [`Skim::next_member`], any name accepted (for objects that are skipped, not matched).
    #[inline(always)]
    fn next_name(&mut self, first: &mut bool) -> Option<Option<RawStr<'a>>> {
        if !self.close_or_comma(b'}', first)? {
            return Some(None);
        }
        let name = self.string()?;
        if self.peek()? != b':' {
            return None;
        }
        self.pos += 1;
        self.skip_ws();
        Some(Some(name))
    }

    /// Whether another element of the array being read follows (positioned at it); `false` once
    /// the closing `]` is consumed. `first` as for [`Skim::next_member`].
    #[inline]
    pub(crate) fn next_element(&mut self, first: &mut bool) -> Option<bool> {
        self.close_or_comma(b']', first)
    }

    /// At a container's next entry: `false` when `close` ends it (consumed), `true` when an entry
    /// follows (after its comma, unless it is the first).
    #[inline(always)]
    fn close_or_comma(&mut self, close: u8, first: &mut bool) -> Option<bool> {
        let next = self.peek()?;
        if next == close {
            self.pos += 1;
            self.depth -= 1;
            self.skip_ws();
            return Some(false);
        }
        if *first {
            *first = false;
        } else {
            if next != b',' {
                return None;
            }
            self.pos += 1;
            self.skip_ws();
        }
        Some(true)
    }

    /// Reads a string value (the cursor is on its opening quote). Inlined: strings are most of a
    /// chunk and most are a few bytes long, so a call per string would cost more than the scan.
    #[inline(always)]
    pub(crate) fn string(&mut self) -> Option<RawStr<'a>> {
        let bytes = self.bytes;
        if bytes.get(self.pos) != Some(&b'"') {
            return None;
        }
        let start = self.pos + 1;
        let mut at = start;
        let mut escaped = false;
        let mut high = false;
        loop {
            let (stop, run_high) = plain_run(bytes, at)?;
            high |= run_high;
            at = stop;
            match bytes[at] {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    at = escape(bytes, at + 1)?;
                }
                _ => return None, // a control character
            }
        }
        let raw = &bytes[start..at];
        if high && std::str::from_utf8(raw).is_err() {
            return None;
        }
        self.pos = at + 1;
        self.skip_ws();
        Some(RawStr { raw, escaped })
    }

    /// Consumes the literal `null`; `false` (nothing consumed) when the next value is not it.
    pub(crate) fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.literal(b"null")?;
        Some(true)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes.get(self.pos..self.pos + word.len())? != word {
            return None;
        }
        self.pos += word.len();
        self.skip_ws();
        Some(())
    }

    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.some_digits()?;
        }
        self.skip_ws();
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.pos;
        self.digits();
        (self.pos > start).then_some(())
    }

    /// Skips one value of any type, validating it.
    pub(crate) fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                self.enter_object()?;
                let mut first = true;
                while self.next_name(&mut first)?.is_some() {
                    self.skip()?;
                }
                Some(())
            }
            b'[' => {
                self.enter_array()?;
                let mut first = true;
                while self.next_element(&mut first)? {
                    self.skip()?;
                }
                Some(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// Skips a value and says whether it was a non-empty string (a string is empty exactly when
    /// its raw text is, escapes or not).
    pub(crate) fn skip_is_nonempty_string(&mut self) -> Option<bool> {
        if self.peek()? == b'"' {
            return Some(!self.string()?.raw.is_empty());
        }
        self.skip().map(|()| false)
    }

    /// Skips a value and says whether it was an array with at least one element.
    pub(crate) fn skip_is_nonempty_array(&mut self) -> Option<bool> {
        if self.peek()? != b'[' {
            return self.skip().map(|()| false);
        }
        self.enter_array()?;
        let mut first = true;
        let mut any = false;
        while self.next_element(&mut first)? {
            any = true;
            self.skip()?;
        }
        Some(any)
    }

    /// A token count where the serde walk reads one leniently (`walk::Lenient(walk::Count)`):
    /// `Some(n)` for a plain non-negative integer that fits in `u64`, `None` for a string,
    /// literal, object or array (skipped). A number with a sign, fraction or exponent, or one
    /// past `u64`, is handed back: serde_json reads those as floats, with range checks of its own.
    pub(crate) fn count(&mut self) -> Option<Option<u64>> {
        if !self.peek()?.is_ascii_digit() {
            return match self.peek()? {
                b'-' => None,
                _ => self.skip().map(|()| None),
            };
        }
        let start = self.pos;
        let mut value: u64 = 0;
        while let Some(digit) = self.peek().filter(u8::is_ascii_digit) {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
            self.pos += 1;
        }
        let leading_zero = self.bytes[start] == b'0' && self.pos - start > 1;
        if leading_zero || matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.skip_ws();
        Some(Some(value))
    }

    /// Where the serde walk runs a lenient pick (`walk::Lenient`) on a value of the wrong shape:
    /// `null`, booleans, arrays and objects are skipped ("nothing here"); a string or number,
    /// which the walk decodes with checks of its own, is handed back (`None`).
    pub(crate) fn skip_lenient(&mut self) -> Option<()> {
        match self.peek()? {
            b'n' | b't' | b'f' | b'{' | b'[' => self.skip(),
            _ => None,
        }
    }

    /// An event's `type` as the walk reads it (`walk::raw_str`): the raw text of a string,
    /// escapes and all; `None` for any other value (skipped).
    pub(crate) fn raw_str_or_skip(&mut self) -> Option<Option<&'a [u8]>> {
        if self.peek()? == b'"' {
            return Some(Some(self.string()?.raw));
        }
        self.skip().map(|()| None)
    }

    /// Skips a value and says whether it was anything but `null`.
    pub(crate) fn skip_is_non_null(&mut self) -> Option<bool> {
        if self.null()? {
            return Some(false);
        }
        self.skip().map(|()| true)
    }
}

/// The index of the first byte at or after `at` that stops a string's plain run (a quote, a
/// backslash or a control character; `None` at the end of the input), and whether a byte of 0x80
/// or above may have been passed (then the string's UTF-8 is checked). Eight bytes at a time
/// (SWAR): a word's lowest flagged byte is exact, as a borrow only runs upward.
#[inline(always)]
fn plain_run(bytes: &[u8], mut at: usize) -> Option<(usize, bool)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut high = 0u64;
    while let Some(word) = bytes.get(at..at + 8) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let v = u64::from_le_bytes(eight);
        let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
        let quote = zero_in(v ^ (ONES * u64::from(b'"')));
        let backslash = zero_in(v ^ (ONES * u64::from(b'\\')));
        let control = v.wrapping_sub(ONES * 0x20) & !v & HIGHS;
        let stops = quote | backslash | control;
        high |= v;
        if stops != 0 {
            return Some((
                at + (stops.trailing_zeros() / 8) as usize,
                high & HIGHS != 0,
            ));
        }
        at += 8;
    }
    // Fewer than eight bytes left.
    while !STRING_STOP[usize::from(*bytes.get(at)?)] {
        high |= u64::from(bytes[at]);
        at += 1;
    }
    // Words and tail bytes alike: a byte of 0x80 or above sets some lane's top bit.
    Some((at, high & HIGHS != 0))
}

/// Validates the escape whose letter is at `at`; the index after it.
fn escape(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 1),
        b'u' => {
            let hex = bytes.get(at + 1..at + 5)?;
            let mut code = 0u32;
            for &digit in hex {
                code = code * 16 + char::from(digit).to_digit(16)?;
            }
            // Surrogates: serde_json checks them when it decodes and not when it skips.
            (!(0xD800..=0xDFFF).contains(&code)).then_some(at + 5)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
