//! Points a refused jq expression back into the YAML file it was written in.
//!
//! The YAML parser forgets where a scalar came from, so we look for the
//! expression's text in the file. Expressions are found in document order,
//! each after the previous one, so that repeated or overlapping expressions
//! land on the right occurrence. A scalar whose text differs from its value
//! (escapes, folding) is not found, and the caller falls back to naming the
//! entry and the position within the expression.

use super::ignore::RuleError;

/// `file:line:column: item: reason` when the refused expression is found in
/// `text`, else `file: item: at column C of the expression: reason`.
/// `before` holds every jq expression written earlier in the file.
pub(crate) fn describe(file: &str, text: &str, before: &[&str], err: &RuleError) -> String {
    let at = |(line, column)| format!("{file}:{line}:{column}: {}: {}", err.item, err.reason);
    let Some(spot) = &err.jq else {
        // A refused pointer: its first occurrence (the same text is refused anywhere).
        let written = err.pointer.as_deref();
        let found = written.and_then(|p| line_column(text, p, find(text, p, 0)?, 0));
        return found.map_or_else(|| format!("{file}: {err}"), at);
    };
    let mut cursor = 0;
    for expr in before {
        if let Some(at) = find(text, expr, cursor) {
            cursor = at + first_line(expr).len();
        }
    }
    find(text, &spot.expression, cursor)
        .and_then(|start| line_column(text, &spot.expression, start, spot.offset))
        .map_or_else(|| format!("{file}: {err}"), at)
}

fn first_line(expr: &str) -> &str {
    expr.split('\n').next().unwrap_or_default()
}

/// Byte position of the first occurrence of `expr`'s first line at or after
/// `from` that stands on its own: not part of a longer word or path.
fn find(text: &str, expr: &str, from: usize) -> Option<usize> {
    let needle = first_line(expr);
    if needle.trim().is_empty() {
        return None;
    }
    let hay = text.get(from..)?;
    hay.match_indices(needle)
        .map(|(i, _)| from + i)
        .find(|&at| {
            let before = text[..at].chars().next_back();
            let after = text[at + needle.len()..].chars().next();
            let fits_before = before.is_none_or(|c| c.is_whitespace() || "'\"[,-:|>".contains(c));
            let fits_after = after.is_none_or(|c| c.is_whitespace() || "'\"],#".contains(c));
            fits_before && fits_after
        })
}

/// 1-based line and column (in characters) in `text` of byte `offset` of
/// `expr`, written at `start`. The lines after the first must follow in the
/// file as a block scalar keeps them (indented), or the answer is None.
fn line_column(text: &str, expr: &str, start: usize, offset: usize) -> Option<(usize, usize)> {
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let first_line_no = text[..start].matches('\n').count() + 1;
    let head = expr.get(..offset)?;
    let k = head.matches('\n').count();
    let col_in_line = head[head.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count();
    if k == 0 {
        return Some((
            first_line_no,
            text[line_start..start].chars().count() + col_in_line + 1,
        ));
    }
    let mut file_lines = text[line_start..].split('\n').skip(1);
    let mut column = None;
    for expr_line in expr.split('\n').skip(1).take(k) {
        let file_line = file_lines.next()?;
        let file_line = file_line.strip_suffix('\r').unwrap_or(file_line);
        if !file_line.ends_with(expr_line) {
            return None;
        }
        let indent = &file_line[..file_line.len() - expr_line.len()];
        if !indent.trim().is_empty() {
            return None;
        }
        column = Some(indent.chars().count() + col_in_line + 1);
    }
    Some((first_line_no + k, column?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ignore::JqSpot;

    fn err(expression: &str, offset: usize) -> RuleError {
        RuleError {
            item: "ignoreDifferences[0].jqPathExpressions[0]".into(),
            reason: "why".into(),
            jq: Some(JqSpot {
                index: 0,
                expression: expression.into(),
                offset,
            }),
            pointer: None,
        }
    }

    #[test]
    fn plain_and_quoted_scalars_are_found() {
        let text = "a:\n  - .x | range(3)\n  - '.y | range(3)'\n";
        assert_eq!(
            describe("p.yaml", text, &[], &err(".x | range(3)", 5)),
            "p.yaml:2:10: ignoreDifferences[0].jqPathExpressions[0]: why"
        );
        assert_eq!(
            describe("p.yaml", text, &[".x | range(3)"], &err(".y | range(3)", 5)),
            "p.yaml:3:11: ignoreDifferences[0].jqPathExpressions[0]: why"
        );
    }

    #[test]
    fn repeated_expressions_land_on_their_own_occurrence() {
        let text = "- .a\n- .a.b\n- .a\n";
        assert_eq!(
            describe("f", text, &[".a"], &err(".a", 1)),
            "f:3:4: ignoreDifferences[0].jqPathExpressions[0]: why"
        );
    }

    #[test]
    fn block_scalar_lines_keep_their_indentation() {
        let text = "x:\n  - |\n    .a\n    | range(1)\n";
        assert_eq!(
            describe("f", text, &[], &err(".a\n| range(1)\n", 5)),
            "f:4:7: ignoreDifferences[0].jqPathExpressions[0]: why"
        );
    }

    #[test]
    fn unfound_text_falls_back_to_the_position_in_the_expression() {
        // A double-quoted scalar with escapes is not the expression's text.
        let text = "- \".a | test(\\\"x\\\") | range(1)\"\n";
        assert_eq!(
            describe("f", text, &[], &err(r#".a | test("x") | range(1)"#, 17)),
            "f: ignoreDifferences[0].jqPathExpressions[0]: at column 18 of the expression: why"
        );
    }
}
