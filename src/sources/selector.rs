//! The label selector grammar of k8s.io/apimachinery's `labels.Parse`, which
//! Flux applies to a Kustomization's or HelmRelease's ignore `labelSelector`
//! and `annotationSelector`: parsed into kube's [`Expression`]s, refusing
//! what Flux would refuse.

use std::collections::BTreeSet;

use crate::text::{is_label_name, is_qualified_name};
use kube::core::Expression;

/// A `labelSelector` or `annotationSelector` that `labels.Parse` (k8s.io/apimachinery,
/// which Flux uses) would refuse, or that kube's selectors cannot express.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    /// Not the selector grammar.
    #[error("`{selector}`: expected {expected} at column {column}")]
    Syntax {
        /// The whole selector.
        selector: String,
        /// Where it goes wrong, from 1.
        column: usize,
        /// What the grammar wants there.
        expected: &'static str,
    },
    /// A key that is not a qualified name (`[prefix/]name`).
    #[error("`{selector}`: `{key}` is not a valid label key")]
    Key {
        /// The whole selector.
        selector: String,
        /// The key.
        key: String,
    },
    /// A value that is not a valid label value.
    #[error("`{selector}`: `{value}` is not a valid label value")]
    Value {
        /// The whole selector.
        selector: String,
        /// The value.
        value: String,
    },
    /// `a > 1` and `a < 1`: apimachinery has them, kube's `Expression` does not.
    #[error("`{selector}`: `{operator}` is not supported")]
    Unsupported {
        /// The whole selector.
        selector: String,
        /// The operator.
        operator: &'static str,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    Word(&'a str),
    Not,
    Equals,
    NotEquals,
    Open,
    Close,
    Comma,
    Greater,
    Less,
    End,
}

/// Tokens with their 1-based columns, as apimachinery's lexer splits them:
/// a word runs until whitespace or one of `!=(),<>`; `==` is `=`.
fn tokens(text: &str) -> Vec<(Token<'_>, usize)> {
    const SPECIAL: &[char] = &['!', '=', '(', ')', ',', '<', '>'];
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        let column = text.len() - rest.len() + 1;
        let mut chars = rest.chars();
        let (token, len) = match chars.next() {
            None => {
                out.push((Token::End, column));
                return out;
            }
            Some('!') if chars.next() == Some('=') => (Token::NotEquals, 2),
            Some('!') => (Token::Not, 1),
            Some('=') if chars.next() == Some('=') => (Token::Equals, 2),
            Some('=') => (Token::Equals, 1),
            Some('(') => (Token::Open, 1),
            Some(')') => (Token::Close, 1),
            Some(',') => (Token::Comma, 1),
            Some('>') => (Token::Greater, 1),
            Some('<') => (Token::Less, 1),
            Some(_) => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || SPECIAL.contains(&c))
                    .unwrap_or(rest.len());
                (Token::Word(&rest[..len]), len)
            }
        };
        out.push((token, column));
        rest = &rest[len..];
    }
}

/// Parses a Kubernetes selector string (`kubectl -l` syntax: `a=b`, `a==b`,
/// `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`, joined by commas) into
/// kube's expressions, whose `matches` has apimachinery's semantics (`!=` and
/// `notin` match an object without the key). kube-core has the types but no
/// string parser.
pub(crate) fn parse_selector(text: &str) -> Result<Vec<Expression>, SelectorError> {
    let mut p = Parser {
        text,
        tokens: tokens(text),
        at: 0,
    };
    let mut out = Vec::new();
    loop {
        match p.expression(&mut out)? {
            (Token::End, _) => return Ok(out),
            (Token::Comma, _) => {}
            (_, column) => return Err(p.syntax(column, "`,` or the end")),
        }
    }
}

/// The tokens of a selector, read in turn.
struct Parser<'a> {
    text: &'a str,
    tokens: Vec<(Token<'a>, usize)>,
    at: usize,
}

impl<'a> Parser<'a> {
    /// The next token; past the end, the end again.
    fn next(&mut self) -> (Token<'a>, usize) {
        let t = self.tokens[self.at.min(self.tokens.len() - 1)];
        self.at += 1;
        t
    }

    fn syntax(&self, column: usize, expected: &'static str) -> SelectorError {
        SelectorError::Syntax {
            selector: self.text.to_owned(),
            column,
            expected,
        }
    }

    fn key(&self, k: &str) -> Result<String, SelectorError> {
        if is_qualified_name(k) {
            Ok(k.to_owned())
        } else {
            Err(SelectorError::Key {
                selector: self.text.to_owned(),
                key: k.to_owned(),
            })
        }
    }

    fn value(&self, v: &str) -> Result<String, SelectorError> {
        if v.is_empty() || is_label_name(v) {
            Ok(v.to_owned())
        } else {
            Err(SelectorError::Value {
                selector: self.text.to_owned(),
                value: v.to_owned(),
            })
        }
    }

    /// One expression, pushed to `out`; returns the token after it.
    fn expression(
        &mut self,
        out: &mut Vec<Expression>,
    ) -> Result<(Token<'a>, usize), SelectorError> {
        let (token, column) = self.next();
        match token {
            Token::Not => match self.next() {
                (Token::Word(k), _) => {
                    out.push(Expression::DoesNotExist(self.key(k)?));
                    Ok(self.next())
                }
                (_, column) => Err(self.syntax(column, "a key after `!`")),
            },
            Token::Word(k) => {
                let k = self.key(k)?;
                self.after_key(k, out)
            }
            _ => Err(self.syntax(column, "a key or `!`")),
        }
    }

    /// What follows key `k`: `in (...)`, `notin (...)`, `=`, `==` or `!=`
    /// and a value, or nothing (the key exists).
    fn after_key(
        &mut self,
        k: String,
        out: &mut Vec<Expression>,
    ) -> Result<(Token<'a>, usize), SelectorError> {
        match self.next() {
            (Token::Word(op @ ("in" | "notin")), _) => {
                let values = self.values()?;
                out.push(if op == "in" {
                    Expression::In(k, values)
                } else {
                    Expression::NotIn(k, values)
                });
                Ok(self.next())
            }
            (op @ (Token::Equals | Token::NotEquals), _) => {
                let mut after = self.next();
                let v = match after {
                    (Token::Word(v), _) => {
                        after = self.next();
                        self.value(v)?
                    }
                    // `a=` selects the empty value.
                    (Token::Comma | Token::End, _) => String::new(),
                    (_, column) => return Err(self.syntax(column, "a value")),
                };
                out.push(if op == Token::Equals {
                    Expression::Equal(k, v)
                } else {
                    Expression::NotEqual(k, v)
                });
                Ok(after)
            }
            (op @ (Token::Greater | Token::Less), _) => Err(SelectorError::Unsupported {
                selector: self.text.to_owned(),
                operator: if op == Token::Greater { ">" } else { "<" },
            }),
            other => {
                out.push(Expression::Exists(k));
                Ok(other)
            }
        }
    }

    /// The value list of `in` and `notin`: `(a, b, ...)`.
    fn values(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let (open, column) = self.next();
        if open != Token::Open {
            return Err(self.syntax(column, "`(` after `in` or `notin`"));
        }
        let mut values = BTreeSet::new();
        loop {
            let (mut t, mut c) = self.next();
            if let Token::Word(v) = t {
                values.insert(self.value(v)?);
                (t, c) = self.next();
            } else {
                // `()` and `(a,)` hold the empty value, as in apimachinery.
                values.insert(String::new());
            }
            match t {
                Token::Comma => continue,
                Token::Close => return Ok(values),
                _ => return Err(self.syntax(c, "`,` or `)` in a value list")),
            }
        }
    }
}
