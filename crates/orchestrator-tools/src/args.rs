//! Argument repair and validation: the step between the model's raw argument text and a handler.
//!
//! Repairs are made only where the intent is unambiguous: JSON wrapped in a markdown fence, trailing
//! commas, an object encoded twice as a JSON string, known aliases of a parameter name (`file_path` for
//! `path`, `start_line` for `offset`), and scalars sent as strings ("10" for an integer). Anything else
//! (text that is not JSON, an unknown parameter, a wrong type, a missing required parameter) is refused
//! with a message that says exactly what to send instead. A call is never run with `{}` in place of
//! arguments that could not be read.

use serde_json::{Map, Value};

/// Aliases accepted by every tool, mapped to the canonical name they stand for. Each is applied only
/// when the tool has the canonical parameter and not the alias itself.
pub const GLOBAL_ALIASES: &[(&str, &str)] = &[
    ("file_path", "path"),
    ("filepath", "path"),
    ("file", "path"),
    ("filename", "path"),
    ("file_name", "path"),
    ("dir", "path"),
    ("directory", "path"),
    ("dir_path", "path"),
    ("start_line", "offset"),
    ("line_offset", "offset"),
    ("max_lines", "limit"),
    ("num_lines", "limit"),
    ("line_count", "limit"),
    ("old_str", "old_string"),
    ("old_text", "old_string"),
    ("new_str", "new_string"),
    ("new_text", "new_string"),
    ("cmd", "command"),
    ("regex", "pattern"),
    ("query", "pattern"),
    ("text", "content"),
    ("contents", "content"),
    ("input_patch", "patch"),
    ("diff", "patch"),
    ("timeout_secs", "timeout"),
    ("timeout_seconds", "timeout"),
    ("id", "job_id"),
];

/// Parses the raw argument text and repairs it where unambiguous. Returns the object and a list of
/// the repairs made (reported in the result's metadata so they are visible).
pub fn parse_raw(raw: &str) -> Result<(Map<String, Value>, Vec<String>), String> {
    let mut repairs = Vec::new();
    let mut text = raw.trim().to_owned();
    if text.is_empty() {
        return Ok((Map::new(), repairs));
    }
    if let Some(inner) = strip_fence(&text) {
        text = inner;
        repairs.push("removed a markdown code fence around the JSON".to_owned());
    }
    let value = match serde_json::from_str::<Value>(&text) {
        Ok(v) => v,
        Err(first) => {
            let fixed = remove_trailing_commas(&text);
            match serde_json::from_str::<Value>(&fixed) {
                Ok(v) if fixed != text => {
                    repairs.push("removed trailing commas".to_owned());
                    v
                }
                _ => {
                    return Err(format!(
                        "the arguments are not valid JSON ({first}). Send one JSON object, e.g. {{\"path\": \"src/main.rs\"}}, with double-quoted keys and strings and no comments."
                    ));
                }
            }
        }
    };
    let value = match value {
        Value::String(s) if s.trim_start().starts_with('{') => {
            match serde_json::from_str::<Value>(&s) {
                Ok(v @ Value::Object(_)) => {
                    repairs.push("decoded an object that was sent as a JSON string".to_owned());
                    v
                }
                _ => return Err(not_object("a string")),
            }
        }
        other => other,
    };
    match value {
        Value::Object(map) => Ok((map, repairs)),
        Value::Null => Ok((Map::new(), repairs)),
        Value::Array(_) => Err(not_object("an array")),
        Value::String(_) => Err(not_object("a string")),
        _ => Err(not_object("a scalar")),
    }
}

fn not_object(what: &str) -> String {
    format!(
        "the arguments must be one JSON object with named parameters, not {what}; e.g. {{\"path\": \"README.md\"}}"
    )
}

/// Returns the text inside a ```json fence if the whole input is one fenced block.
fn strip_fence(text: &str) -> Option<String> {
    let rest = text.strip_prefix("```")?;
    let newline = rest.find('\n')?;
    let lang = rest[..newline].trim();
    if !(lang.is_empty() || lang.eq_ignore_ascii_case("json")) {
        return None;
    }
    let body = rest[newline + 1..].trim_end();
    let body = body.strip_suffix("```")?;
    Some(body.trim().to_owned())
}

/// Removes commas that directly precede `}` or `]` (whitespace between allowed), outside strings.
fn remove_trailing_commas(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for (i, &c) in chars.iter().enumerate() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        if c == '"' {
            in_string = true;
            out.push(c);
            continue;
        }
        if c == ',' {
            let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// Checks an argument object against a tool's schema (the subset the registry uses: an object with
/// typed `properties`, `required`, `enum`, arrays with typed `items`), renames aliases and coerces
/// scalars sent as strings. Returns the repaired object or a corrective message.
pub fn validate(
    tool: &str,
    schema: &Value,
    tool_aliases: &[(String, String)],
    mut args: Map<String, Value>,
    repairs: &mut Vec<String>,
) -> Result<Map<String, Value>, String> {
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let known: Vec<&str> = props.keys().map(String::as_str).collect();

    // Aliases: the tool's own first, then the global ones.
    let aliases = tool_aliases
        .iter()
        .map(|(a, c)| (a.as_str(), c.as_str()))
        .chain(GLOBAL_ALIASES.iter().copied());
    for (alias, canonical) in aliases {
        if props.contains_key(alias) || !props.contains_key(canonical) {
            continue;
        }
        if let Some(v) = args.remove(alias) {
            match args.get(canonical) {
                Some(existing) if existing != &v => {
                    return Err(format!(
                        "{tool}: both '{canonical}' and its alias '{alias}' were given with different values; send only '{canonical}'"
                    ));
                }
                Some(_) => {}
                None => {
                    repairs.push(format!("renamed '{alias}' to '{canonical}'"));
                    args.insert(canonical.to_owned(), v);
                }
            }
        }
    }

    // `null` for an optional parameter means "not given": models send it often.
    args.retain(|_, v| !v.is_null());

    let unknown: Vec<&String> = args.keys().filter(|k| !props.contains_key(*k)).collect();
    if let Some(first) = unknown.first() {
        let suggestion = closest(first, &known)
            .map(|s| format!(" Did you mean '{s}'?"))
            .unwrap_or_default();
        return Err(format!(
            "{tool}: unknown parameter '{first}'.{suggestion} Known parameters: {}.",
            known.join(", ")
        ));
    }

    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        let missing: Vec<&str> = required
            .iter()
            .filter_map(Value::as_str)
            .filter(|r| !args.contains_key(*r))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{tool}: missing required parameter{} {}. Known parameters: {}.",
                if missing.len() > 1 { "s" } else { "" },
                missing
                    .iter()
                    .map(|m| format!("'{m}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                known.join(", ")
            ));
        }
    }

    for (name, value) in args.iter_mut() {
        let Some(prop) = props.get(name) else {
            continue;
        };
        check_value(tool, name, prop, value, repairs)?;
    }
    Ok(args)
}

fn check_value(
    tool: &str,
    name: &str,
    prop: &Value,
    value: &mut Value,
    repairs: &mut Vec<String>,
) -> Result<(), String> {
    let Some(ty) = prop.get("type").and_then(Value::as_str) else {
        return Ok(());
    };
    let ok = match ty {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    };
    if !ok {
        let coerced = coerce(ty, value);
        match coerced {
            Some(v) => {
                repairs.push(format!("converted '{name}' to {ty}"));
                *value = v;
            }
            None => {
                return Err(format!(
                    "{tool}: parameter '{name}' must be {} {ty}, got {}: {}",
                    if ty == "integer" || ty == "array" || ty == "object" {
                        "an"
                    } else {
                        "a"
                    },
                    kind_of(value),
                    short(value)
                ));
            }
        }
    }
    if ty == "integer"
        && let (Some(min), Some(v)) = (prop.get("minimum").and_then(Value::as_i64), value.as_i64())
        && v < min
    {
        return Err(format!(
            "{tool}: parameter '{name}' must be at least {min}, got {v}"
        ));
    }
    if let Some(options) = prop.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let list: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        return Err(format!(
            "{tool}: parameter '{name}' must be one of {}, got {}",
            list.join(", "),
            short(value)
        ));
    }
    if ty == "array"
        && let (Some(items), Some(list)) = (prop.get("items"), value.as_array_mut())
    {
        for (i, item) in list.iter_mut().enumerate() {
            check_value(tool, &format!("{name}[{i}]"), items, item, repairs)?;
        }
    }
    if ty == "object"
        && let (Some(sub), Some(obj)) = (
            prop.get("properties").and_then(Value::as_object),
            value.as_object_mut(),
        )
    {
        if let Some(required) = prop.get("required").and_then(Value::as_array) {
            for r in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!(
                        "{tool}: '{name}' is missing its required field '{r}'"
                    ));
                }
            }
        }
        let known: Vec<&str> = sub.keys().map(String::as_str).collect();
        for key in obj.keys() {
            if !sub.contains_key(key) {
                return Err(format!(
                    "{tool}: '{name}' has an unknown field '{key}'; its fields are {}",
                    known.join(", ")
                ));
            }
        }
        for (k, v) in obj.iter_mut() {
            if let Some(p) = sub.get(k) {
                check_value(tool, &format!("{name}.{k}"), p, v, repairs)?;
            }
        }
    }
    Ok(())
}

/// Coerces a value sent as the wrong JSON type when the reading is unambiguous.
fn coerce(ty: &str, value: &Value) -> Option<Value> {
    match (ty, value) {
        ("integer", Value::String(s)) => s.trim().parse::<i64>().ok().map(Value::from),
        ("integer", Value::Number(n)) => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| Value::from(f as i64)),
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        ("boolean", Value::String(s)) => match s.trim() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ("array", Value::String(s)) if s.trim_start().starts_with('[') => {
            serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_array)
        }
        ("object", Value::String(s)) if s.trim_start().starts_with('{') => {
            serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_object)
        }
        _ => None,
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        let cut = (0..=80).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
        format!("{}...", &s[..cut])
    } else {
        s
    }
}

/// The known name closest to `name` by edit distance, if it is close enough to be a likely typo.
pub(crate) fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// JSON values a model might send as arguments: nested objects and arrays of scalars.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[^\\u{0}]{0,20}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        // `PROPTEST_CASES` runs more (`just fuzz`).
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(512)
        ))]

        /// Whatever a model sends, repair answers with arguments or an error: it never panics.
        #[test]
        fn repair_never_panics(
            raw in prop_oneof!["\\PC{0,200}", "[{}\\[\\]\":,.a-z0-9 `\n\\\\-]{0,120}"],
        ) {
            let _ = parse_raw(&raw);
        }

        /// Valid JSON objects pass unchanged, with nothing reported as repaired.
        #[test]
        fn valid_objects_pass_unchanged(
            object in prop::collection::btree_map("[a-z_]{1,8}", value(), 0..6),
        ) {
            let map: Map<String, Value> = object.into_iter().collect();
            let text = Value::Object(map.clone()).to_string();
            let (parsed, repairs) = parse_raw(&text).unwrap();
            prop_assert_eq!(parsed, map);
            prop_assert!(repairs.is_empty(), "{:?}", repairs);
        }
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "offset": {"type": "integer", "minimum": 1},
            "mode": {"type": "string", "enum": ["a", "b"]}, "flag": {"type": "boolean"}
        }, "required": ["path"]})
    }

    #[test]
    fn repairs_fences_commas_and_aliases() {
        let (map, repairs) =
            parse_raw("```json\n{\"file_path\": \"a.rs\", \"start_line\": \"3\",}\n```").unwrap();
        assert_eq!(repairs.len(), 2);
        let mut repairs = repairs;
        let out = validate("t", &schema(), &[], map, &mut repairs).unwrap();
        assert_eq!(out["path"], "a.rs");
        assert_eq!(out["offset"], 3);
    }

    #[test]
    fn refuses_what_is_ambiguous() {
        assert!(parse_raw("path=a.rs").is_err());
        assert!(parse_raw("[1,2]").is_err());
        let mut r = vec![];
        let err = validate(
            "t",
            &schema(),
            &[],
            parse_raw("{\"pth\": \"x\", \"path\": \"y\"}").unwrap().0,
            &mut r,
        )
        .unwrap_err();
        assert!(
            err.contains("unknown parameter 'pth'") && err.contains("Did you mean 'path'"),
            "{err}"
        );
        let err = validate("t", &schema(), &[], parse_raw("{}").unwrap().0, &mut r).unwrap_err();
        assert!(err.contains("missing required parameter 'path'"), "{err}");
        let err = validate(
            "t",
            &schema(),
            &[],
            parse_raw("{\"path\": 3}").unwrap().0,
            &mut r,
        )
        .unwrap_err();
        assert!(err.contains("must be a string"), "{err}");
        let err = validate(
            "t",
            &schema(),
            &[],
            parse_raw("{\"path\": \"a\", \"offset\": \"x\"}").unwrap().0,
            &mut r,
        )
        .unwrap_err();
        assert!(err.contains("must be an integer"), "{err}");
        let err = validate(
            "t",
            &schema(),
            &[],
            parse_raw("{\"path\": \"a\", \"mode\": \"c\"}").unwrap().0,
            &mut r,
        )
        .unwrap_err();
        assert!(err.contains("one of"), "{err}");
        assert!(remove_trailing_commas("{\"a\": \",}\",}") == "{\"a\": \",}\"}");
    }
}
