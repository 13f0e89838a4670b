//! Printing: aligned tables for people, JSON for scripts.
//!
//! Every `--json` output is a typed value (an admin answer of `ferry_kit::admin`, or one of the
//! CLI's own `Cli*` structs) encoded here, once.

use std::fmt::Display;

use serde::Serialize;

/// Prints rows as a table with a header, columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_uppercase()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// `value` as JSON text, pretty or on one line. Keys come out sorted, as the CLI has always
/// printed them (it went through `serde_json::Value`, whose objects are ordered by key), so
/// the text a script or a test compares stays the same whatever order a struct declares.
pub fn to_text<T: Serialize>(value: &T, pretty: bool) -> serde_json::Result<String> {
    let value = serde_json::to_value(value)?;
    if pretty {
        serde_json::to_string_pretty(&value)
    } else {
        serde_json::to_string(&value)
    }
}

/// Prints `value` as pretty JSON.
pub fn json<T: Serialize>(value: &T) {
    print_text(to_text(value, true));
}

/// Prints `value` as JSON on one line (a stream of them, for `ferry watch --json`).
pub fn json_line<T: Serialize>(value: &T) {
    print_text(to_text(value, false));
}

fn print_text(text: serde_json::Result<String>) {
    // The CLI's values are plain data with string keys: encoding them cannot fail, but if it
    // ever did, say so rather than print half an answer.
    match text {
        Ok(text) => println!("{text}"),
        Err(err) => eprintln!("ferry: cannot write the answer as JSON: {err}"),
    }
}

/// An optional field as a table cell: `-` when there is nothing to say.
pub fn cell<T: Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".into(), |value| value.to_string())
}

/// A float as a table cell, in JSON's form (`0.0`, `0.72`), as the tables have always shown
/// it; `-` when there is none.
pub fn float(value: Option<f64>) -> String {
    cell(value.and_then(serde_json::Number::from_f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_keep_their_json_form() {
        assert_eq!(float(Some(0.0)), "0.0");
        assert_eq!(float(Some(0.72)), "0.72");
        assert_eq!(float(Some(f64::NAN)), "-");
        assert_eq!(float(None), "-");
    }

    #[test]
    fn keys_come_out_sorted_whatever_the_declared_order() {
        #[derive(Serialize)]
        struct Backwards {
            zebra: u8,
            apple: u8,
        }
        let text = to_text(&Backwards { zebra: 1, apple: 2 }, false);
        assert_eq!(text.ok().as_deref(), Some(r#"{"apple":2,"zebra":1}"#));
    }
}
