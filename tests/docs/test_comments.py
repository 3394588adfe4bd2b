"""No issue numbers in code comments or docstrings (tests/support/comment_rules.py, also run by
`make lint`); and the rule finds them where they hide."""

from __future__ import annotations

from support import comment_rules as cr


def test_no_issue_numbers_in_comments() -> None:
    found = cr.check()
    new = {f: h for f, h in found.items() if f not in cr.KNOWN}
    assert not new, f"issue numbers in comments (say why instead): {new}"


def test_known_set_only_shrinks() -> None:
    assert cr.KNOWN <= set(cr.check()), sorted(cr.KNOWN - set(cr.check()))


def test_the_rule_finds_issue_numbers() -> None:
    py = ('"""Docstring (issue 14)."""\nx = 1  # see Issue #7\n'
          's = "issue 3 in a string is output, not a comment"\n')
    assert cr.hits("a.py", py) == [(1, "issue 14"), (2, "Issue #7")]
    c = "int x; // issue-13\n/* two\n   lines, issue 2 */\nconst char *s = \"issue 5\";\n"
    assert cr.hits("a.c", c) == [(1, "issue-13"), (3, "issue 2")]
    assert cr.hits("Makefile", "## target (issue 12): does\nx:\n\t@echo issue 9\n") == [(1, "issue 12")]
    assert cr.hits("a.py", "# the issues it fixed, none numbered\n") == []
