//! Bytes as lowercase hex text: how buffered sessions carry keys and bytes in JSON, how seals
//! carry their tags, how the MAC key is stored, and CPR's range service token.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` to `out` in hex.
pub(crate) fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(2 * bytes.len());
    for &byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)]);
        out.push(DIGITS[usize::from(byte & 0xf)]);
    }
}

/// `bytes` in hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = Vec::new();
    push_hex(&mut out, bytes);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// The bytes of hex text, in either case; `None` for an odd length or anything but hex digits.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if text.len() % 2 != 0 {
        return None;
    }
    text.chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// A hex digit's value (a byte past ASCII reads as a Latin-1 letter, which is none).
fn digit(c: u8) -> Option<u8> {
    char::from(c).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&all)).unwrap(), all);
        assert_eq!(hex(&[0, 1, 0xab, 0xff]), "0001abff");
        assert_eq!(unhex("00ff7A"), Some(vec![0, 0xff, 0x7a]));
        assert_eq!(unhex(""), Some(vec![]));
    }

    #[test]
    fn hex_parsing_refuses_odd_lengths_and_other_characters() {
        for bad in ["abc", "0g", "zz", "+a", "a\u{e9}0", "\u{e9}", "0 "] {
            assert_eq!(unhex(bad), None, "{bad:?}");
        }
    }
}
