//! The names a client certificate offers the `client_cert` identity source: its subject's common
//! name and the first DNS name, URI and e-mail address of its subject alternative names.
//!
//! Read once per connection, right after the TLS handshake, from the leaf certificate rustls
//! verified against `[server.tls] client_ca` (so the names are the CA's word, not the client's):
//! every request of the connection, HTTP/1 keep-alive or h2 streams, reuses them. Which one names
//! the tenant is `tenants.cert_field`, chosen per request by the revision the request takes, so a
//! reload that changes it applies to open connections too.
//!
//! A name that is empty, only spaces, or holds a control character is no name: it could not be a
//! label value or a log field as it is. Its length is bounded where every tenant name is (the
//! label budget and [`super::MAX_NAME_BYTES`]).
use x509_parser::extensions::GeneralName;

use crate::config::CertField;

/// The names of one client certificate that can name a tenant.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CertificateNames {
    subject_cn: Option<Box<str>>,
    san_dns: Option<Box<str>>,
    san_uri: Option<Box<str>>,
    san_email: Option<Box<str>>,
}

impl CertificateNames {
    /// The names of the DER certificate `der`; none of a certificate that does not parse (rustls
    /// verified it, so it does) or of a name that is not text.
    pub fn from_der(der: &[u8]) -> Self {
        let Ok((_, certificate)) = x509_parser::parse_x509_certificate(der) else {
            return Self::default();
        };
        let subject_cn = certificate
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .and_then(name);
        let mut names = Self {
            subject_cn,
            ..Self::default()
        };
        // A certificate with a malformed or repeated SAN extension offers no SAN names.
        if let Ok(Some(san)) = certificate.subject_alternative_name() {
            for general in &san.value.general_names {
                let (slot, text) = match general {
                    GeneralName::DNSName(text) => (&mut names.san_dns, text),
                    GeneralName::URI(text) => (&mut names.san_uri, text),
                    GeneralName::RFC822Name(text) => (&mut names.san_email, text),
                    _ => continue,
                };
                if slot.is_none() {
                    *slot = name(text);
                }
            }
        }
        names
    }

    /// The name `field` asks for, if the certificate has one.
    pub fn get(&self, field: CertField) -> Option<&str> {
        match field {
            CertField::SubjectCn => self.subject_cn.as_deref(),
            CertField::SanDns => self.san_dns.as_deref(),
            CertField::SanUri => self.san_uri.as_deref(),
            CertField::SanEmail => self.san_email.as_deref(),
        }
    }
}

/// `text` trimmed, if it is a usable name.
fn name(text: &str) -> Option<Box<str>> {
    let text = text.trim();
    (!text.is_empty() && !text.chars().any(char::is_control)).then(|| text.into())
}

#[cfg(test)]
mod tests;
