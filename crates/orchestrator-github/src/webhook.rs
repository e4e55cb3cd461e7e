//! Verifying GitHub webhook deliveries: the `X-Hub-Signature-256` header is `sha256=` followed by
//! the hex HMAC-SHA256 of the raw request body under the webhook's secret.
//!
//! The comparison is constant-time (through [`hmac::Mac::verify_slice`]), so the time a refusal
//! takes tells an attacker nothing about how many leading bytes of a forged signature were right.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Why a delivery's signature was refused. None is retryable: a redelivery with the same body and
/// header is refused the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The delivery has no `X-Hub-Signature-256` header (the webhook has no secret configured, or
    /// the request is not from GitHub). Not retryable.
    #[error("the X-Hub-Signature-256 header is missing")]
    Missing,
    /// The header is not `sha256=` followed by 64 hex digits. Not retryable.
    #[error("the X-Hub-Signature-256 header is not sha256=<64 hex digits>")]
    Malformed,
    /// The signature is well formed but does not match the body under this secret. Not retryable.
    #[error("the X-Hub-Signature-256 signature does not match the body")]
    Mismatch,
}

const PREFIX: &str = "sha256=";

/// Checks the `X-Hub-Signature-256` header value `header` against the raw `body` under `secret`.
pub fn verify_signature(
    secret: &[u8],
    body: &[u8],
    header: Option<&str>,
) -> Result<(), SignatureError> {
    let mut check = SignatureCheck::new(secret, header)?;
    check.update(body);
    check.finish()
}

/// A signature checked while the body streams in: the header is read before any of the body (a
/// missing or malformed one is refused at once, before the body is read), each piece of the body
/// is fed to the HMAC as it arrives, and [`SignatureCheck::finish`] compares in constant time.
/// The listener uses it so that it never has to hold an unverified body to start hashing it.
pub struct SignatureCheck {
    mac: Hmac<Sha256>,
    claimed: [u8; 32],
}

impl std::fmt::Debug for SignatureCheck {
    /// Neither the keyed state nor the claimed signature.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignatureCheck").finish_non_exhaustive()
    }
}

impl SignatureCheck {
    /// Reads the header value (`None` when the request has none) and keys the HMAC with `secret`.
    pub fn new(secret: &[u8], header: Option<&str>) -> Result<SignatureCheck, SignatureError> {
        let header = header.ok_or(SignatureError::Missing)?.trim();
        let digits = header
            .strip_prefix(PREFIX)
            .ok_or(SignatureError::Malformed)?;
        let claimed: [u8; 32] = hex::decode(digits)
            .map_err(|_| SignatureError::Malformed)?
            .try_into()
            .map_err(|_| SignatureError::Malformed)?;
        // HMAC accepts keys of any length, so this cannot fail; map it anyway rather than unwrap.
        let mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| SignatureError::Mismatch)?;
        Ok(SignatureCheck { mac, claimed })
    }

    /// Feeds the next piece of the body.
    pub fn update(&mut self, piece: &[u8]) {
        self.mac.update(piece);
    }

    /// Whether the whole body fed matches the claimed signature, compared in constant time.
    pub fn finish(self) -> Result<(), SignatureError> {
        self.mac
            .verify_slice(&self.claimed)
            .map_err(|_| SignatureError::Mismatch)
    }
}

/// The header value GitHub would send for `body` under `secret`; for tests and for signing
/// deliveries a fake GitHub sends.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        // Unreachable for HMAC (any key length is accepted), but a signature nobody can match is
        // the safe answer if it ever were.
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("{PREFIX}{}", hex::encode(mac.finalize().into_bytes()))
}
