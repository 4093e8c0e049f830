"""wire/forms.py: which schemas are forms the cards render, what a form
answers untouched, and the one server-side check of an answer."""

from __future__ import annotations

import pytest

from sessions_app.wire import forms

FORM = {
    "type": "object",
    "title": "Profile",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 5},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "born": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "plan": {"type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"], "default": "a"},
        "age": {"type": "integer", "minimum": 1, "maximum": 150},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "news": {"type": "boolean", "default": False},
    },
    "required": ["name", "plan"],
}


def test_a_flat_object_of_the_four_types_is_a_form():
    """Every type, bound, format, enum and default of the subset passes;
    an empty form (a plain yes or no) is one too."""
    assert forms.schema_problem(FORM) is None
    assert forms.schema_problem({"type": "object"}) is None


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ("x", "a form is an object schema"),
        ({"type": "array"}, "a form is an object schema"),
        ({"properties": []}, "a form's properties are an object"),
        ({"properties": {"a": {"type": "array"}}}, "field 'a': its type is one of"),
        ({"properties": {"a": {"type": "string", "pattern": "x"}}}, "pattern is not supported"),
        ({"properties": {"a": {"type": "string", "format": "ipv4"}}}, "its format is one of"),
        ({"properties": {"a": {"type": "string", "enum": []}}}, "its enum lists strings"),
        ({"properties": {"a": {"type": "string", "enum": ["x"], "enumNames": []}}}, "enumNames"),
        ({"properties": {"a": {"type": "integer", "minimum": "1"}}}, "its minimum is a number"),
        ({"properties": {"a": {"type": "integer", "default": "x"}}}, "its default is not"),
        ({"properties": {"a": {"type": "string", "title": 1}}}, "its title is text"),
        ({"properties": {"a": {"type": "string"}}, "required": ["b"]}, "'required' lists"),
        ({"properties": {str(i): {"type": "boolean"} for i in range(21)}}, "at most 20"),
        ({"properties": {"a": {"type": "string"}}, "required": [{}]}, "'required' lists"),
        ({"properties": {"a": {"type": "string"}}, "required": "a"}, "'required' lists"),
        ({"properties": {"a": {"type": "string", "enum": "abc"}}}, "its enum lists strings"),
        ({"properties": {"a": {"type": "string", "enum": {"x": 1}}}}, "its enum lists strings"),
        ({"properties": {"a": {"type": "string", "enum": ["x"], "enumNames": [1]}}}, "enumNames"),
    ],
)
def test_anything_else_is_not_a_form_and_says_why(schema, why):
    """A schema outside the subset is refused with its reason (an MCP
    server's is then declined, never shown half)."""
    assert why in forms.schema_problem(schema)


def test_defaults_answer_a_form_only_when_every_required_field_has_one():
    """Defaults, true for a required yes/no; None when a required field has
    neither (only a typed answer can answer it)."""
    assert forms.defaults(FORM) is None
    assert forms.defaults({**FORM, "required": ["plan"]}) == {"plan": "a", "news": False}
    sure = {"properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}
    assert forms.defaults(sure) == {"sure": True}
    # A default the check refuses answers nothing: approving cannot send it.
    blank = {"properties": {"c": {"type": "string", "default": ""}}, "required": ["c"]}
    assert forms.defaults(blank) is None


def test_a_good_answer_is_kept_as_given_and_empty_fields_are_left_out():
    """Every field valid: no errors; an optional field left empty ("" or
    null) is not answered."""
    answer = {
        "name": "Ada",
        "email": "ada@example.org",
        "site": "https://example.org/x",
        "born": "1815-12-10",
        "at": "2026-12-07T21:00:00Z",
        "plan": "b",
        "age": 36,
        "ratio": 0.5,
        "news": True,
    }
    assert forms.check(FORM, answer) == (answer, {})
    assert forms.check(FORM, {"name": "Ada", "plan": "a", "email": "", "age": None}) == (
        {"name": "Ada", "plan": "a"},
        {},
    )


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("name", "A", "must be at least 2 characters"),
        ("name", "Adelaide", "must be at most 5 characters"),
        ("name", 5, "must be text"),
        ("name", "A\x00b", "must be text"),
        ("email", "ada", "must be an email address"),
        ("site", "not a uri", "must be a URI"),
        ("born", "10/12/1815", "must be a date (YYYY-MM-DD)"),
        ("at", "2026-12-07", "must be a date and time with its offset (RFC 3339)"),
        ("at", "2026-12-07T21:00", "must be a date and time with its offset (RFC 3339)"),
        ("plan", "c", "must be one of the choices"),
        ("age", 1.5, "must be a whole number"),
        ("age", True, "must be a whole number"),
        ("age", "36", "must be a whole number"),
        ("age", 0, "must be at least 1"),
        ("age", 151, "must be at most 150"),
        ("ratio", float("nan"), "must be a number"),
        ("ratio", float("inf"), "must be a number"),
        ("age", float("-inf"), "must be a whole number"),
        ("age", 10**400, "must be at most 9007199254740992 either way"),
        ("ratio", -(2**53) - 1, "must be at most 9007199254740992 either way"),
        ("ratio", 2, "must be at most 1"),
        ("news", "yes", "must be true or false"),
    ],
)
def test_each_bad_value_is_refused_with_what_is_wrong(field, value, why):
    """The check names the field and its problem, and keeps the rest."""
    clean, errors = forms.check(FORM, {"name": "Ada", "plan": "a", field: value})
    assert errors == {field: why}
    assert field not in clean


def test_a_missing_required_field_and_an_unknown_one_are_refused():
    """Required fields are answered; fields the form lacks are not given."""
    _clean, errors = forms.check(FORM, {"plan": "a", "color": "red"})
    assert errors == {"name": "required", "color": "this form has no such field"}
    assert forms.errors_text(errors) == "color: this form has no such field; name: required"
    assert forms.check(FORM, ["x"])[1] == {"": "the answer is an object of the form's fields"}
