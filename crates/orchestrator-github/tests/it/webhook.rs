//! `verify_signature` against GitHub's published test vector and the ways a delivery is refused.

use orchestrator_github::{SignatureError, sign, verify_signature};

// From GitHub's "Validating webhook deliveries" documentation.
const SECRET: &[u8] = b"It's a Secret to Everybody";
const PAYLOAD: &[u8] = b"Hello, World!";
const SIGNATURE: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

#[test]
fn githubs_test_vector_verifies() {
    assert_eq!(verify_signature(SECRET, PAYLOAD, Some(SIGNATURE)), Ok(()));
    assert_eq!(sign(SECRET, PAYLOAD), SIGNATURE);
}

/// A named case: secret, body, header, and the verdict expected.
type Case<'a> = (
    &'a str,
    &'a [u8],
    &'a [u8],
    Option<&'a str>,
    Result<(), SignatureError>,
);

#[test]
fn refusals_carry_the_right_reason() {
    let upper = format!("sha256={}", SIGNATURE["sha256=".len()..].to_uppercase());
    let short = &SIGNATURE[..SIGNATURE.len() - 2];
    let cases: &[Case<'_>] = &[
        (
            "hex digits in upper case",
            SECRET,
            PAYLOAD,
            Some(&upper),
            Ok(()),
        ),
        (
            "body changed by one byte",
            SECRET,
            b"Hello, World?",
            Some(SIGNATURE),
            Err(SignatureError::Mismatch),
        ),
        (
            "body with a trailing newline",
            SECRET,
            b"Hello, World!\n",
            Some(SIGNATURE),
            Err(SignatureError::Mismatch),
        ),
        (
            "wrong secret",
            b"It's a Secret to Nobody",
            PAYLOAD,
            Some(SIGNATURE),
            Err(SignatureError::Mismatch),
        ),
        (
            "empty secret",
            b"",
            PAYLOAD,
            Some(SIGNATURE),
            Err(SignatureError::Mismatch),
        ),
        (
            "missing header",
            SECRET,
            PAYLOAD,
            None,
            Err(SignatureError::Missing),
        ),
        (
            "no sha256= prefix",
            SECRET,
            PAYLOAD,
            Some(&SIGNATURE["sha256=".len()..]),
            Err(SignatureError::Malformed),
        ),
        (
            "sha1= prefix",
            SECRET,
            PAYLOAD,
            Some("sha1=757107ea0eb2509fc211221cce984b8a37570b6d"),
            Err(SignatureError::Malformed),
        ),
        (
            "bad hex",
            SECRET,
            PAYLOAD,
            Some("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043ezz"),
            Err(SignatureError::Malformed),
        ),
        (
            "too short",
            SECRET,
            PAYLOAD,
            Some(short),
            Err(SignatureError::Malformed),
        ),
        (
            "empty header",
            SECRET,
            PAYLOAD,
            Some(""),
            Err(SignatureError::Malformed),
        ),
    ];
    for (name, secret, body, header, expected) in cases {
        assert_eq!(verify_signature(secret, body, *header), *expected, "{name}");
    }
}

/// The listener checks a delivery as it streams: the header is judged before any of the body, and
/// the body fed in any pieces gives the verdict of the whole.
#[test]
fn a_signature_checked_in_pieces_agrees_with_the_whole() {
    use orchestrator_github::SignatureCheck;
    for split in 0..=PAYLOAD.len() {
        let mut check = SignatureCheck::new(SECRET, Some(SIGNATURE)).unwrap();
        check.update(&PAYLOAD[..split]);
        check.update(&PAYLOAD[split..]);
        assert_eq!(check.finish(), Ok(()), "split at {split}");
        if split == PAYLOAD.len() {
            continue;
        }
        let mut check = SignatureCheck::new(SECRET, Some(SIGNATURE)).unwrap();
        check.update(&PAYLOAD[..split]);
        assert_eq!(
            check.finish(),
            Err(SignatureError::Mismatch),
            "only {split} bytes"
        );
    }
    assert_eq!(
        SignatureCheck::new(SECRET, None).unwrap_err(),
        SignatureError::Missing
    );
    assert_eq!(
        SignatureCheck::new(SECRET, Some("sha256=00")).unwrap_err(),
        SignatureError::Malformed
    );
}
