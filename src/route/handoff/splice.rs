//! The one edit both protocols make to the client's body: a member of their own as its first,
//! every byte the client sent kept (the body is not re-serialised).

use bytes::{Bytes, BytesMut};

/// `body`, a JSON object, with `"name":value` as its first member (`value` is JSON text); `None`
/// when the body does not start with an object.
pub fn first_member(body: &[u8], name: &str, value: &str) -> Option<Bytes> {
    let open = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body[open] != b'{' {
        return None;
    }
    let rest = &body[open + 1..];
    let empty = rest
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'}');
    let mut out = BytesMut::with_capacity(body.len() + name.len() + value.len() + 4);
    out.extend_from_slice(&body[..=open]);
    out.extend_from_slice(b"\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(value.as_bytes());
    if !empty {
        out.extend_from_slice(b",");
    }
    out.extend_from_slice(rest);
    Some(out.freeze())
}

/// Whether `body` has `"name"` anywhere (a member the client set itself, or a text that quotes
/// it exactly: then the protocol leaves the request alone, which is never wrong).
pub fn mentions(body: &[u8], name: &str) -> bool {
    memchr::memmem::find_iter(body, name.as_bytes())
        .any(|at| at > 0 && body[at - 1] == b'"' && body.get(at + name.len()) == Some(&b'"'))
}
