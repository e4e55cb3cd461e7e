//! Columns between the model and a server: the model counts characters from 1, a server counts
//! code units (UTF-16 unless it took UTF-8) from 0.

use super::client::Encoding;

/// The server's column of character `col` (0-based) of `line`.
pub fn to_units(line: &str, col: usize, encoding: Encoding) -> u32 {
    let units: usize = line
        .chars()
        .take(col)
        .map(|c| match encoding {
            Encoding::Utf8 => c.len_utf8(),
            Encoding::Utf16 => c.len_utf16(),
        })
        .sum();
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// The character (0-based) at the server's column `units` of `line`.
pub fn to_chars(line: &str, units: u32, encoding: Encoding) -> usize {
    let mut seen = 0usize;
    for (i, c) in line.chars().enumerate() {
        if seen >= units as usize {
            return i;
        }
        seen += match encoding {
            Encoding::Utf8 => c.len_utf8(),
            Encoding::Utf16 => c.len_utf16(),
        };
    }
    line.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_round_trip_through_both_encodings() {
        let line = "let é = \"😀\"; x";
        let x = line.chars().position(|c| c == 'x').unwrap();
        let utf16 = to_units(line, x, Encoding::Utf16);
        let utf8 = to_units(line, x, Encoding::Utf8);
        // é is 1 UTF-16 unit and 2 bytes; 😀 is 2 units and 4 bytes.
        assert_eq!(utf16 as usize, x + 1);
        assert_eq!(utf8 as usize, x + 1 + 3);
        assert_eq!(to_chars(line, utf16, Encoding::Utf16), x);
        assert_eq!(to_chars(line, utf8, Encoding::Utf8), x);
        assert_eq!(to_chars(line, 999, Encoding::Utf8), line.chars().count());
    }
}
