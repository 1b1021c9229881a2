//! The `filter` of `aggregated/instances`, as much of Google's list-filter
//! syntax as the platform uses: `labels.KEY=VALUE` comparisons joined by
//! `AND` (or by spaces alone), each or any group of them optionally in
//! parentheses, `=` optionally spaced, the value bare or double-quoted.
//! Anything else (`OR`, `NOT`, `!=`, `:`, other fields, unbalanced
//! parentheses) is refused.

/// A piece of a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    Eq,
    /// A run of other characters (a field, a bare value, `AND`).
    Word(String),
    /// A double-quoted value, without its quotes.
    Quoted(String),
}

fn tokens(filter: &str) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut chars = filter.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' | ')' | '=' => {
                chars.next();
                out.push(match c {
                    '(' => Token::Open,
                    ')' => Token::Close,
                    _ => Token::Eq,
                });
            }
            '"' => {
                chars.next();
                let mut value = String::new();
                loop {
                    match chars.next()? {
                        '"' => break,
                        c => value.push(c),
                    }
                }
                out.push(Token::Quoted(value));
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '(' | ')' | '=' | '"') {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                out.push(Token::Word(word));
            }
        }
    }
    Some(out)
}

/// A label key as GCE allows it: a lower-case letter, then lower-case
/// letters, digits, `_` and `-`, at most 63 in all.
fn label_key(key: &str) -> bool {
    key.len() <= 63
        && key.starts_with(|c: char| c.is_ascii_lowercase())
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// A bare value: letters, digits, `_` and `-`.
fn bare_value(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    /// Terms up to the end (`depth` 0) or the `)` closing a group.
    fn terms(&mut self, depth: usize, out: &mut Vec<(String, String)>) -> Option<()> {
        // Whether a term may come next (at the start and after `AND`), and
        // whether one must (after `AND`).
        let mut first = true;
        let mut after_and = false;
        loop {
            match self.peek() {
                None if depth == 0 && !after_and && !first => return Some(()),
                None => return None,
                Some(Token::Close) if depth > 0 && !after_and && !first => {
                    self.at += 1;
                    return Some(());
                }
                Some(Token::Word(w)) if w == "AND" => {
                    if first || after_and {
                        return None;
                    }
                    self.at += 1;
                    after_and = true;
                    continue;
                }
                Some(Token::Open) => {
                    self.at += 1;
                    self.terms(depth + 1, out)?;
                }
                Some(Token::Word(_)) => out.push(self.comparison()?),
                Some(_) => return None,
            }
            first = false;
            after_and = false;
        }
    }

    /// `labels.KEY = VALUE`.
    fn comparison(&mut self) -> Option<(String, String)> {
        let Some(Token::Word(field)) = self.next() else {
            return None;
        };
        let key = field.strip_prefix("labels.").filter(|k| label_key(k))?;
        if self.next()? != Token::Eq {
            return None;
        }
        let value = match self.next()? {
            Token::Word(v) if bare_value(&v) => v,
            Token::Quoted(v) => v,
            _ => return None,
        };
        Some((key.to_owned(), value))
    }
}

/// The `(key, value)` label pairs a filter demands, all of which must hold
/// (an empty filter demands none).
pub(crate) fn parse_filter(filter: &str) -> Result<Vec<(String, String)>, String> {
    let bad = || format!("Invalid value for field 'filter': '{filter}'.");
    let tokens = tokens(filter).ok_or_else(bad)?;
    let mut out = Vec::new();
    if tokens.is_empty() {
        return Ok(out);
    }
    let mut parser = Parser { tokens, at: 0 };
    parser.terms(0, &mut out).ok_or_else(bad)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn accepted() {
        let both = pairs(&[("bc-managed", "true"), ("bc-installation", "abc")]);
        for filter in [
            "labels.bc-managed=true AND labels.bc-installation=abc",
            "labels.bc-managed = true AND labels.bc-installation = \"abc\"",
            "(labels.bc-managed=true) AND (labels.bc-installation=abc)",
            "(labels.bc-managed=true AND labels.bc-installation=abc)",
            "((labels.bc-managed=true)) AND ((labels.bc-installation=abc))",
            "labels.bc-managed=true labels.bc-installation=abc",
            "  labels.bc-managed=true\tAND\nlabels.bc-installation=abc  ",
        ] {
            assert_eq!(parse_filter(filter), Ok(both.clone()), "{filter}");
        }
        assert_eq!(
            parse_filter("labels.bc-managed=true"),
            Ok(pairs(&[("bc-managed", "true")]))
        );
        assert_eq!(parse_filter("labels.a=\"x y\""), Ok(pairs(&[("a", "x y")])));
        assert_eq!(parse_filter(""), Ok(Vec::new()));
        assert_eq!(parse_filter("   "), Ok(Vec::new()));
    }

    #[test]
    fn refused() {
        for filter in [
            "name=x",
            "labels.a=b OR labels.c=d",
            "NOT labels.a=b",
            "labels.a!=b",
            "labels.a:b",
            "labels.a=",
            "labels.=b",
            "labels.A=b",
            "labels.a=b=c",
            "labels.a=b AND",
            "AND labels.a=b",
            "labels.a=b AND AND labels.c=d",
            "(labels.a=b",
            "labels.a=b)",
            "()",
            "(labels.a=b) AND ()",
            "labels.a=\"b",
            "labels.a=b*",
            "labels.a",
            "labels.a=b and labels.c=d",
        ] {
            assert!(parse_filter(filter).is_err(), "{filter}");
        }
    }
}
