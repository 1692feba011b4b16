//! A fragment's dirty list (004 §3.1): the keys written while its primary was away, kept as one
//! pinned cache entry on the fragment's secondary. The coordinator makes it with its start line
//! before any client can learn of the secondary; clients append a line per written key with a
//! plain APPEND, which keeps the pin. A list without its start was lost (evicted, or its instance
//! restarted) and rebuilt by appends: it cannot vouch for the primary.
//!
//! A key is any bytes, so each line is its length in decimal, a space, the key and a newline.

/// The entry's key for `fragment`.
pub fn key(fragment: u32) -> Vec<u8> {
    format!("gemini:dirty:{fragment}").into_bytes()
}

/// The first line of every list.
pub const START: &[u8] = b"gemini:dirty-list-start\n";

/// The line that lists `key`.
pub fn line(key: &[u8]) -> Vec<u8> {
    let mut line = format!("{} ", key.len()).into_bytes();
    line.extend_from_slice(key);
    line.push(b'\n');
    line
}

/// Why a list cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListError {
    /// It lacks its start: lost and rebuilt by appends.
    Lost,
    /// A line does not parse (at this byte offset).
    Malformed(usize),
}

/// The keys of a list, in the order they were appended (with repeats).
pub fn parse(list: &[u8]) -> Result<Vec<Vec<u8>>, ListError> {
    let mut rest = list.strip_prefix(START).ok_or(ListError::Lost)?;
    let mut keys = Vec::new();
    while !rest.is_empty() {
        let at = list.len() - rest.len();
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or(ListError::Malformed(at))?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or(ListError::Malformed(at))?;
        let key_start = space + 1;
        let end = key_start.checked_add(len).ok_or(ListError::Malformed(at))?;
        if rest.get(end) != Some(&b'\n') {
            return Err(ListError::Malformed(at));
        }
        keys.push(rest[key_start..end].to_vec());
        rest = &rest[end + 1..];
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_key_round_trips() {
        let keys: [&[u8]; 4] = [b"user1", b"", b"with\nnewline and 3 spaces", b"\xff\x00"];
        let mut list = START.to_vec();
        for key in keys {
            list.extend(line(key));
        }
        let parsed = parse(&list).unwrap();
        assert_eq!(parsed, keys.map(<[u8]>::to_vec));
        assert_eq!(parse(START), Ok(Vec::new()));
    }

    #[test]
    fn a_list_without_its_start_or_cut_short_is_refused() {
        assert_eq!(parse(&line(b"k")), Err(ListError::Lost));
        let mut list = START.to_vec();
        list.extend(line(b"key"));
        list.pop();
        assert_eq!(parse(&list), Err(ListError::Malformed(START.len())));
        let mut list = START.to_vec();
        list.extend_from_slice(b"99999999999999999999999 k\n");
        assert!(matches!(parse(&list), Err(ListError::Malformed(_))));
    }
}
