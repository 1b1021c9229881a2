//! What bcctl prints: aligned tables by default, or the API's answer exactly
//! as JSON (`-o json`) or YAML (`-o yaml`).

use comfy_table::{ContentArrangement, Table, presets};
use serde_json::Value;

use crate::exit::Failure;
use crate::when;

/// The output format (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// The API's answer, pretty-printed.
    Json,
    /// The API's answer as YAML.
    Yaml,
}

/// How a column's value is shown in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// As is (strings unquoted).
    Text,
    /// Epoch milliseconds shown as RFC 3339.
    Time,
    /// A boolean shown as `yes` or `no`.
    YesNo,
}

/// One table column: a header and a path into each item (`a.b`).
#[derive(Debug, Clone, Copy)]
pub struct Col {
    /// The header.
    pub header: &'static str,
    /// The dotted path of the value in an item.
    pub path: &'static str,
    /// How to show it.
    pub kind: Kind,
}

/// A text column.
pub const fn text(header: &'static str, path: &'static str) -> Col {
    Col {
        header,
        path,
        kind: Kind::Text,
    }
}

/// A time column.
pub const fn time(header: &'static str, path: &'static str) -> Col {
    Col {
        header,
        path,
        kind: Kind::Time,
    }
}

/// A yes/no column (a boolean).
pub const fn yes_no(header: &'static str, path: &'static str) -> Col {
    Col {
        header,
        path,
        kind: Kind::YesNo,
    }
}

/// Printing options.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    /// The format.
    pub format: Format,
    /// Times in the local offset instead of UTC.
    pub local: bool,
}

fn at<'a>(item: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(item, |v, k| &v[k])
}

impl Printer {
    /// Shows one value as a table cell.
    pub fn cell(&self, v: &Value, kind: Kind) -> String {
        match (v, kind) {
            (Value::Null, _) => String::new(),
            (Value::Number(n), Kind::Time) => n
                .as_i64()
                .map_or_else(|| n.to_string(), |ms| when::format_instant(ms, self.local)),
            (Value::Bool(b), Kind::YesNo) => if *b { "yes" } else { "no" }.to_owned(),
            (Value::String(s), _) => s.clone(),
            (Value::Array(a), _) => a
                .iter()
                .map(|x| self.cell(x, Kind::Text))
                .collect::<Vec<_>>()
                .join(","),
            (other, _) => other.to_string(),
        }
    }

    /// A table of `items` with `cols`.
    pub fn table(&self, items: &[Value], cols: &[Col]) -> String {
        let cols: Vec<(&str, &str, Kind)> =
            cols.iter().map(|c| (c.header, c.path, c.kind)).collect();
        self.table_of(items, &cols)
    }

    /// A table of `items` with columns named by their fields (a generic
    /// answer's scalar fields), times shown as RFC 3339.
    pub fn table_by_fields(&self, items: &[Value], fields: &[String]) -> String {
        let cols: Vec<(&str, &str, Kind)> = fields
            .iter()
            .map(|f| {
                let kind = if is_time_field(f) {
                    Kind::Time
                } else {
                    Kind::Text
                };
                (f.as_str(), f.as_str(), kind)
            })
            .collect();
        self.table_of(items, &cols)
    }

    fn table_of(&self, items: &[Value], cols: &[(&str, &str, Kind)]) -> String {
        let mut t = new_table();
        t.set_header(cols.iter().map(|c| c.0));
        for item in items {
            t.add_row(cols.iter().map(|c| self.cell(at(item, c.1), c.2)));
        }
        finish(t)
    }

    /// One object as `FIELD  VALUE` rows, times shown as RFC 3339.
    pub fn object(&self, obj: &Value) -> String {
        let mut t = new_table();
        t.set_header(["FIELD", "VALUE"]);
        if let Some(map) = obj.as_object() {
            for (k, v) in map {
                let kind = if is_time_field(k) {
                    Kind::Time
                } else {
                    Kind::Text
                };
                t.add_row([k.clone(), self.cell(v, kind)]);
            }
        }
        finish(t)
    }

    /// Prints the answer: in table mode `table` renders it (nothing is
    /// printed when it gives `None`); otherwise the whole answer.
    #[expect(clippy::print_stdout, reason = "the answer is the command's output")]
    pub fn print(&self, answer: &Value, table: impl FnOnce(&Printer) -> Option<String>) {
        match self.format {
            Format::Table => {
                if let Some(text) = table(self) {
                    println!("{}", text.trim_end());
                }
            }
            other => println!("{}", render(answer, other)),
        }
    }
}

/// The answer as JSON or YAML text.
pub fn render(answer: &Value, format: Format) -> String {
    match format {
        Format::Yaml => serde_yaml_ng::to_string(answer)
            .unwrap_or_else(|e| Failure::Unexpected(e.to_string()).report()),
        _ => serde_json::to_string_pretty(answer).unwrap_or_default(),
    }
}

/// Fields holding epoch milliseconds.
pub fn is_time_field(name: &str) -> bool {
    name.ends_with("At")
        || matches!(
            name,
            "from" | "to" | "now" | "periodStart" | "periodEnd" | "meteredThrough" | "at"
        )
        || name.ends_with("PeriodStart")
        || name.ends_with("PeriodEnd")
}

/// The table's text: columns two spaces apart, no margin, no trailing
/// spaces.
fn finish(mut t: Table) -> String {
    for c in t.column_iter_mut() {
        c.set_padding((0, 2));
    }
    t.to_string()
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

fn new_table() -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_and_show_times() {
        let p = Printer {
            format: Format::Table,
            local: false,
        };
        let items = [
            json!({ "id": "a", "startsAt": 1_893_456_000_000i64, "n": { "k": 1 } }),
            json!({ "id": "longer", "startsAt": null, "n": { "k": 22 } }),
        ];
        let cols = [
            text("ID", "id"),
            time("STARTS", "startsAt"),
            text("K", "n.k"),
        ];
        let out = p.table(&items, &cols);
        let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[1].contains("2030-01-01T00:00:00Z"), "{out}");
        let k = lines[0].find('K').expect("K");
        assert_eq!(lines[2].find("22"), Some(k), "columns align: {out}");
    }

    #[test]
    fn yes_no_columns_show_booleans_as_words() {
        let p = Printer {
            format: Format::Table,
            local: false,
        };
        let items = [
            json!({ "id": "a", "flag": true }),
            json!({ "id": "b", "flag": false }),
            json!({ "id": "c" }),
        ];
        let out = p.table(&items, &[text("ID", "id"), yes_no("FLAG", "flag")]);
        let rows: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(rows, ["a   yes", "b   no", "c"], "{out}");
    }
}
