//! The disclosure budget: how much of each server's schemas the model sees.
//!
//! Large servers can flood the prompt with input schemas. Per server, on the
//! listing after the visibility filter and without quarantined tools, the
//! catalogue picks a tier:
//!
//! | order | test | tier |
//! |---|---|---|
//! | 1 | server in `always_load` | [`Tier::Inline`] |
//! | 2 | descriptions + full schemas fit the budget | [`Tier::Inline`] |
//! | 3 | deferred schemas (names, scalar types, `required`) fit | [`Tier::Names`] |
//! | 4 | otherwise | [`Tier::Bare`] (`{"type":"object"}`) |
//!
//! Deferral sheds schema *prose*, never the argument *contract* first: a
//! model sent 2 malformed calls in 5 runs with bare schemas and 0 in 5 with
//! names and types kept. Underneath every tier sits a floor no tier drops —
//! each tool's name and description, which is what the model routes on. A
//! server whose floor alone exceeds the budget gets a
//! `disclosure-budget-exceeded` diagnostic pointing at the `tools` filter,
//! rather than having its descriptions trimmed.
//!
//! Tokens are estimated at four characters (UTF-16 code units) each: an
//! order-of-magnitude decision needs no tokenizer.

use std::borrow::Borrow;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::diagnostic::{Diagnostic, Rule};
use crate::schema::{BARE_SCHEMA, Schema, measure_compact};
use crate::tool::Tool;

/// The default budget: about 10% of a 200k-token context window.
pub const DEFAULT_DISCLOSURE_BUDGET_TOKENS: usize = 20_000;

/// The meta-tool that returns a deferred tool's full schema.
pub const DESCRIBE_TOOL_NAME: &str = "mcp__describe_tool";

/// Appended to the description of every tool whose schema is deferred.
pub const DEFERRED_NOTE: &str = " Full input schema available via mcp__describe_tool.";

/// Estimated tokens in `text`: UTF-16 code units / 4, rounded up.
///
/// ```
/// use portcullis_catalog::disclosure::estimate_tokens;
///
/// assert_eq!(estimate_tokens(""), 0);
/// assert_eq!(estimate_tokens("abcde"), 2);
/// assert_eq!(estimate_tokens("😀😀"), 1); // two code units each
/// ```
pub fn estimate_tokens(text: &str) -> usize {
    utf16_len(text).div_ceil(4)
}

fn utf16_len(text: &str) -> usize {
    // Most text is ASCII, one unit a byte, and `is_ascii` checks a word at
    // a time; decoding every character of every description was most of
    // the tier decision's cost.
    if text.is_ascii() {
        return text.len();
    }
    // From the UTF-8 bytes: a continuation byte adds nothing, a 4-byte
    // lead byte two (a surrogate pair).
    text.bytes()
        .map(|b| match b {
            0x80..=0xBF => 0,
            0xF0..=0xFF => 2,
            _ => 1,
        })
        .sum()
}

/// A per-server token budget.
///
/// In config and JSON it is the string `"auto"` or a number of tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Budget {
    /// The default budget.
    #[default]
    Auto,
    /// An explicit number of tokens.
    Tokens(usize),
}

impl Serialize for Budget {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Budget::Auto => serializer.serialize_str("auto"),
            Budget::Tokens(n) => serializer.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Tokens(usize),
            Word(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Tokens(n) => Ok(Budget::Tokens(n)),
            Raw::Word(word) if word == "auto" => Ok(Budget::Auto),
            Raw::Word(word) => Err(serde::de::Error::custom(format!(
                "budget must be a number of tokens or \"auto\", not {word:?}"
            ))),
        }
    }
}

impl Budget {
    /// The budget in tokens.
    pub fn tokens(self) -> usize {
        match self {
            Budget::Auto => DEFAULT_DISCLOSURE_BUDGET_TOKENS,
            Budget::Tokens(n) => n,
        }
    }
}

/// Disclosure settings for a whole catalogue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisclosureOptions {
    /// Tokens per server.
    pub budget: Budget,
    /// Server names (as projected, after collision suffixes) that always
    /// inline their full schemas.
    pub always_load: BTreeSet<String>,
}

/// How much of a tool's schema is disclosed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The full schema and description.
    Inline,
    /// Parameter names, scalar types and `required`.
    Names,
    /// `{"type":"object"}`.
    Bare,
}

impl Tier {
    /// `"inline"`, `"names"` or `"bare"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Inline => "inline",
            Tier::Names => "names",
            Tier::Bare => "bare",
        }
    }
}

/// The tier chosen for one server, with the figures behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierDecision {
    /// The tier.
    pub tier: Tier,
    /// Estimated tokens with every schema inlined.
    pub inline_tokens: usize,
    /// The budget applied.
    pub budget: usize,
    /// `disclosure-budget-exceeded`, when even the catalogue floor is over.
    pub diagnostic: Option<Diagnostic>,
}

/// Picks the tier for `server`'s `tools` (already filtered, without
/// quarantined tools).
pub fn choose_tier<T: Borrow<Tool>>(
    server: &str,
    tools: &[T],
    options: &DisclosureOptions,
) -> TierDecision {
    let budget = options.budget.tokens();
    let measured = measure(tools);
    let inline_tokens = measured.inline_tokens();
    let decided = |tier| TierDecision {
        tier,
        inline_tokens,
        budget,
        diagnostic: None,
    };
    if options.always_load.contains(server) || inline_tokens <= budget {
        return decided(Tier::Inline);
    }
    let names_units: usize = tools
        .iter()
        .map(|t| deferred_schema_utf16_len(t.borrow().input_schema.as_ref()))
        .sum::<usize>()
        + tools.len().saturating_sub(1);
    let tier = if names_units.div_ceil(4) <= budget {
        Tier::Names
    } else {
        Tier::Bare
    };
    let mut decision = decided(tier);
    // The floor is checked in every deferred tier, not only the bare one:
    // the names-tier test counts schemas but no descriptions, so one server
    // with a few enormous descriptions would otherwise slip through silently.
    let floor = measured.floor_tokens();
    if floor > budget {
        decision.diagnostic = Some(Diagnostic::new(
            Rule::DisclosureBudgetExceeded,
            server,
            format!(
                "MCP server \"{server}\" publishes {} tools; their names and descriptions alone come to about {floor} tokens, over the disclosure budget of {budget} tokens, so the catalogue stays over budget even with every schema deferred. Descriptions are kept because the model routes on them. Narrow the server with the `tools` filter to go below budget.",
                tools.len()
            ),
        ));
    }
    decision
}

/// A server's listing measured once for the tier decision: each
/// description is counted once for both the inline estimate and the floor.
struct Measured {
    tools: usize,
    descriptions: usize,
    schemas: usize,
}

impl Measured {
    /// The length of the `\n`-join of description and schema per tool, in
    /// tokens.
    fn inline_tokens(&self) -> usize {
        (self.descriptions + self.schemas + (self.tools * 2).saturating_sub(1)).div_ceil(4)
    }

    /// [`catalogue_floor`] of the same tools.
    fn floor_tokens(&self) -> usize {
        (self.descriptions
            + self.tools * (DEFERRED_NOTE.len() + BARE_SCHEMA.len())
            + (self.tools * 2).saturating_sub(1))
        .div_ceil(4)
    }
}

// The note is counted as its byte length: it is ASCII.
const _: () = assert!(DEFERRED_NOTE.is_ascii());

fn measure<T: Borrow<Tool>>(tools: &[T]) -> Measured {
    let mut measured = Measured {
        tools: tools.len(),
        descriptions: 0,
        schemas: 0,
    };
    for tool in tools {
        let tool = tool.borrow();
        measured.descriptions += utf16_len(tool.description_or_name());
        measured.schemas += match &tool.input_schema {
            // Held as text: that text is what the value serialises to.
            Some(schema) => match schema.compact() {
                Some((_, units)) => units,
                None => json_utf16_len(schema),
            },
            None => BARE_SCHEMA.len(),
        };
    }
    measured
}

#[cfg(test)]
fn inline_estimate<T: Borrow<Tool>>(tools: &[T]) -> usize {
    measure(tools).inline_tokens()
}

/// The irreducible prompt cost of a server: every tool's (deferred)
/// description and a bare schema, in estimated tokens.
pub fn catalogue_floor<T: Borrow<Tool>>(tools: &[T]) -> usize {
    let mut units = 0usize;
    for tool in tools {
        units += utf16_len(tool.borrow().description_or_name()) + utf16_len(DEFERRED_NOTE);
        units += BARE_SCHEMA.len();
    }
    units += (tools.len() * 2).saturating_sub(1);
    units.div_ceil(4)
}

fn compact_json(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The UTF-16 length of `deferred_schema(schema)` as compact JSON, computed
/// without building the deferred schema (the tier decision measures every
/// tool of a server; only the chosen tier is then built).
fn deferred_schema_utf16_len(schema: Option<&Schema>) -> usize {
    // Measured as the stored text was read (one pass for both lengths).
    if let Some(units) = schema.and_then(Schema::deferred_units) {
        return units;
    }
    // Held as text without a form: measured by the same pass.
    if let Some(measure) = schema
        .and_then(Schema::compact)
        .and_then(|(text, _)| measure_compact(text, None))
    {
        return measure.deferred_units;
    }
    let schema = schema.map(Schema::value);
    let Some(properties) = schema
        .and_then(|s| field(s, "properties"))
        .and_then(Value::as_object)
    else {
        return r#"{"type":"object"}"#.len();
    };
    // {"type":"object","properties":{ … }}
    let mut units = r#"{"type":"object","properties":{}}"#.len();
    for (i, (name, property)) in properties.iter().enumerate() {
        if i > 0 {
            units += 1;
        }
        // "name":{"type":"T"}
        units += string_json_utf16_len(name)
            + r#":{"type":}"#.len()
            + string_json_utf16_len(deferred_type(property));
    }
    if let Some(required) = schema
        .and_then(|s| field(s, "required"))
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
    {
        // ,"required":[…]
        units += r#","required":"#.len();
        units += 2 + required.len().saturating_sub(1);
        units += required.iter().map(json_utf16_len).sum::<usize>();
    }
    units
}

/// `value[key]` when `value` is an object. A schema's maps are small, and
/// comparing a few keys costs less than hashing the one looked for
/// (SipHash, on every lookup of thousands of schemas on a wake); keys are
/// unique, so the answer is the map's own.
fn field<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    let map = value.as_object()?;
    if map.len() <= 8 {
        map.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        map.get(key)
    }
}

/// The scalar type a deferred schema keeps for one property.
fn deferred_type(property: &Value) -> &str {
    match field(property, "type") {
        Some(Value::String(t)) => t,
        Some(Value::Array(types)) => types.first().and_then(Value::as_str).unwrap_or("string"),
        _ => "string",
    }
}

/// The UTF-16 length of `value` as compact JSON (exactly what
/// `serde_json::to_string` writes), counted by walking the value: the tier
/// decision measures every schema of a server on every projection, and
/// running each through the serialiser only to count its output was most
/// of the decision's cost.
fn json_utf16_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => number_len(n),
        Value::String(s) => string_json_utf16_len(s),
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_utf16_len).sum::<usize>()
        }
        Value::Object(map) => {
            2 + map.len().saturating_sub(1)
                + map
                    .iter()
                    .map(|(key, value)| string_json_utf16_len(key) + 1 + json_utf16_len(value))
                    .sum::<usize>()
        }
    }
}

/// What one byte of a string adds to its JSON text, in UTF-16 code units:
/// `"` and `\` and the short control escapes take two, other control
/// characters six (`\u001f`); a UTF-8 continuation byte adds nothing, a
/// 4-byte lead two (a surrogate pair). serde_json escapes nothing else.
const JSON_UNITS: [u8; 256] = {
    let mut units = [1u8; 256];
    let mut b = 0;
    while b < 0x20 {
        units[b] = 6;
        b += 1;
    }
    units[0x08] = 2;
    units[0x09] = 2;
    units[0x0A] = 2;
    units[0x0C] = 2;
    units[0x0D] = 2;
    units[b'"' as usize] = 2;
    units[b'\\' as usize] = 2;
    let mut b = 0x80;
    while b < 0x100 {
        units[b] = crate::schema::utf16_units_of_utf8_byte(b);
        b += 1;
    }
    units
};

/// The UTF-16 length of `text` as a JSON string, quotes included.
fn string_json_utf16_len(text: &str) -> usize {
    2 + text
        .bytes()
        .map(|b| usize::from(JSON_UNITS[usize::from(b)]))
        .sum::<usize>()
}

/// The length of a number as serde_json writes it (its `Display` is the
/// same text: itoa for integers, ryu for the finite floats a `Value` holds);
/// counted through a formatter, so nothing is allocated.
fn number_len(n: &serde_json::Number) -> usize {
    struct Count(usize);
    impl std::fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = std::fmt::Write::write_fmt(&mut count, format_args!("{n}"));
    count.0
}

/// The names-tier schema: `{type:"object", properties:{p:{type:T}}, required?}`.
/// `T` is the property's `type` string, the first entry of a `type` array, or
/// `"string"`; `required` is kept only when it is a non-empty array.
/// Anything that is not an object schema with a plain `properties` object
/// becomes `{"type":"object"}`.
///
/// ```
/// use portcullis_catalog::disclosure::deferred_schema;
/// use serde_json::json;
///
/// let full = json!({
///     "type": "object",
///     "properties": {
///         "postal_prefix": {"type": "string", "description": "First digits", "pattern": "^[0-9]+$"},
///         "quantity": {"type": ["integer", "null"], "minimum": 1},
///         "options": {"type": "object", "properties": {"gift": {"type": "boolean"}}}
///     },
///     "required": ["postal_prefix"]
/// });
/// assert_eq!(deferred_schema(Some(&full)), json!({
///     "type": "object",
///     "properties": {
///         "postal_prefix": {"type": "string"},
///         "quantity": {"type": "integer"},
///         "options": {"type": "object"}
///     },
///     "required": ["postal_prefix"]
/// }));
/// ```
pub fn deferred_schema(schema: Option<&Value>) -> Value {
    let Some(properties) = schema
        .and_then(|s| field(s, "properties"))
        .and_then(Value::as_object)
    else {
        return bare_schema();
    };
    // Built from the values directly, each map sized once: on a wake this
    // runs for thousands of tools (`json!` goes through the serialiser for
    // every value).
    let mut kept = Map::with_capacity(properties.len());
    for (name, property) in properties {
        let mut typed = Map::with_capacity(1);
        typed.insert(
            "type".to_owned(),
            Value::String(deferred_type(property).to_owned()),
        );
        kept.insert(name.clone(), Value::Object(typed));
    }
    let required = schema
        .and_then(|s| field(s, "required"))
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty());
    let mut out = Map::with_capacity(2 + usize::from(required.is_some()));
    out.insert("type".to_owned(), Value::String("object".to_owned()));
    out.insert("properties".to_owned(), Value::Object(kept));
    if let Some(required) = required {
        out.insert("required".to_owned(), Value::Array(required.clone()));
    }
    Value::Object(out)
}

/// The deferred schema of `schema` ([`deferred_schema`]): written as
/// compact text when `schema` is held as text (shared when it was written
/// as the stored text was read), else built as a value.
fn deferred(schema: Option<&Schema>) -> Schema {
    if let Some(written) = schema.and_then(Schema::write_deferred_form) {
        return written;
    }
    Schema::from(deferred_schema(schema.map(Schema::value)))
}

/// `{"type":"object"}`.
fn bare_schema() -> Value {
    let mut bare = Map::with_capacity(1);
    bare.insert("type".to_owned(), Value::String("object".to_owned()));
    Value::Object(bare)
}

/// The description a deferred tool is shown with.
pub fn deferred_description(tool: &Tool) -> String {
    // Sized once: `format!` guesses short and copies long descriptions
    // again as it grows.
    let description = tool.description_or_name();
    let mut shown = String::with_capacity(description.len() + DEFERRED_NOTE.len());
    shown.push_str(description);
    shown.push_str(DEFERRED_NOTE);
    shown
}

/// The definition the model sees for `tool` at `tier`. The name never changes.
pub fn disclose(tool: &Tool, tier: Tier) -> Tool {
    disclose_owned(tool.clone(), tier).0
}

/// [`disclose`] without a copy: returns the definition the model sees and,
/// when the tier replaced it, the full input schema that was taken out.
pub fn disclose_owned(mut tool: Tool, tier: Tier) -> (Tool, Option<Value>) {
    if tier == Tier::Inline {
        return (tool, None);
    }
    let description = deferred_description(&tool);
    let full = tool.input_schema.take();
    tool.input_schema = Some(match tier {
        Tier::Names => deferred(full.as_ref()),
        _ => Schema::from(bare_schema()),
    });
    tool.description = Some(description);
    (tool, full.map(Schema::into_value))
}

/// [`disclose_owned`] from a borrowed tool: copies only what the tier
/// keeps. A deferred tier replaces the description and the schema, so
/// neither is copied into the shown definition (the full schema is copied
/// once, as the second value); the projection reads listings the toolset
/// keeps, and this is what spares it a copy of every cached tool.
pub fn disclose_borrowed(tool: &Tool, tier: Tier) -> (Tool, Option<Value>) {
    if tier == Tier::Inline {
        return (tool.clone(), None);
    }
    (
        disclose_shown(tool, tier),
        tool.input_schema.as_ref().map(|s| s.value().clone()),
    )
}

/// The definition [`disclose_borrowed`] shows, without the copy of the
/// full schema: for a caller that reaches the published schema otherwise
/// (the catalogue, from a shared listing).
pub fn disclose_shown(tool: &Tool, tier: Tier) -> Tool {
    disclose_named(tool, tier, tool.name.clone())
}

/// The definition the model sees for `tool` at `tier`, under `name` (the
/// projected name: the published one is not copied only to be replaced).
pub(crate) fn disclose_named(tool: &Tool, tier: Tier, name: String) -> Tool {
    // Every field named, so a field added to `Tool` must be decided here.
    let Tool {
        name: _,
        title,
        description,
        input_schema,
        output_schema,
        annotations,
        meta,
    } = tool;
    let (description, input_schema) = match tier {
        Tier::Inline => (description.clone(), input_schema.clone()),
        Tier::Names => (
            Some(deferred_description(tool)),
            Some(deferred(input_schema.as_ref())),
        ),
        Tier::Bare => (
            Some(deferred_description(tool)),
            Some(Schema::from(bare_schema())),
        ),
    };
    Tool {
        name,
        title: title.clone(),
        description,
        input_schema,
        output_schema: output_schema.clone(),
        annotations: annotations.clone(),
        meta: meta.clone(),
    }
}

/// The definition of `mcp__describe_tool`, registered once any server defers.
pub fn describe_tool_definition() -> Tool {
    Tool::new(DESCRIBE_TOOL_NAME)
        .with_description(
            "Fetch the full JSON Schema input for a deferred MCP tool. Call the tool by its own qualified name after inspecting the schema.",
        )
        .with_input_schema(json!({
            "type": "object",
            "properties": {
                "tool": {"type": "string", "description": "Qualified MCP tool name, e.g. 'server__tool'."}
            },
            "required": ["tool"]
        }))
}

/// The message for a `mcp__describe_tool` call naming no projected tool.
pub fn unknown_tool_message(name: &str) -> String {
    format!("Unknown MCP tool \"{name}\". Use a qualified name like server__tool.")
}

/// The MCP part of a system prompt: for each tool in order, its name and
/// description, and its full schema only when that tool is disclosed inline.
/// Deferred schemas are omitted (the model fetches them on demand), and no
/// server `instructions` ever appear — the signature has no room for them.
///
/// ```
/// use portcullis_catalog::disclosure::{compose_system_prompt, Tier};
/// use portcullis_catalog::Tool;
/// use serde_json::json;
///
/// let small = Tool::new("docs__search").with_description("Search").with_input_schema(json!({"type":"object"}));
/// let big = Tool::new("big__t").with_description("T. Full input schema available via mcp__describe_tool.");
/// let prompt = compose_system_prompt([(&small, Tier::Inline), (&big, Tier::Bare)]);
/// assert_eq!(prompt, "docs__search: Search\n{\"type\":\"object\"}\nbig__t: T. Full input schema available via mcp__describe_tool.");
/// ```
pub fn compose_system_prompt<'a, I>(tools: I) -> String
where
    I: IntoIterator<Item = (&'a Tool, Tier)>,
{
    let mut lines = Vec::new();
    for (tool, tier) in tools {
        lines.push(format!("{}: {}", tool.name, tool.description_or_name()));
        if tier == Tier::Inline {
            lines.push(compact_json(&tool.input_schema_or_default()));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fat_tool(i: usize) -> Tool {
        Tool::new(format!("tool_{i}"))
            .with_description(format!("Tool {i}. {}", "Explains at length what it does. ".repeat(10)))
            .with_input_schema(json!({
                "type": "object",
                "properties": {
                    "postal_prefix": {"type": "string", "description": "The first digits of a postal code, ".repeat(6)},
                    "quantity": {"type": "number", "description": "How many items to ship, at least one.".repeat(4)},
                    "express": {"type": "boolean", "description": "Ship overnight if possible.".repeat(4)}
                },
                "required": ["postal_prefix", "quantity"]
            }))
    }

    #[test]
    fn disclosing_a_borrowed_tool_gives_what_the_owned_one_gives() {
        let mut full = fat_tool(1)
            .with_title("Ship")
            .with_output_schema(json!({"type": "object"}))
            .with_annotations(crate::tool::ToolAnnotations::read_only(true));
        full.meta = Some(serde_json::Map::from_iter([("k".to_owned(), json!(1))]));
        for tool in [full, Tool::new("bare")] {
            for tier in [Tier::Inline, Tier::Names, Tier::Bare] {
                assert_eq!(
                    disclose_borrowed(&tool, tier),
                    disclose_owned(tool.clone(), tier),
                    "{tier:?}"
                );
            }
        }
    }

    #[test]
    fn inline_estimate_matches_the_joined_string() {
        let tools: Vec<Tool> = (0..5).map(fat_tool).chain([Tool::new("bare")]).collect();
        let mut parts = Vec::new();
        for t in &tools {
            parts.push(t.description_or_name().to_owned());
            parts.push(compact_json(&t.input_schema_or_default()));
        }
        assert_eq!(inline_estimate(&tools), estimate_tokens(&parts.join("\n")));
        assert_eq!(inline_estimate::<Tool>(&[]), 0);
        assert_eq!(measure(&tools).floor_tokens(), catalogue_floor(&tools));
        assert_eq!(measure::<Tool>(&[]).floor_tokens(), 0);
    }

    #[test]
    fn small_server_is_inline() {
        let tools: Vec<Tool> = (0..3).map(fat_tool).collect();
        let d = choose_tier("small", &tools, &DisclosureOptions::default());
        assert_eq!(d.tier, Tier::Inline);
        assert_eq!(d.budget, 20_000);
        assert!(d.diagnostic.is_none());
    }

    #[test]
    fn two_hundred_fat_tools_fit_in_the_names_tier() {
        let tools: Vec<Tool> = (0..200).map(fat_tool).collect();
        let d = choose_tier("broad", &tools, &DisclosureOptions::default());
        assert!(d.inline_tokens > 20_000, "{}", d.inline_tokens);
        assert_eq!(d.tier, Tier::Names);
        let shown = disclose(&tools[7], d.tier);
        let schema = serde_json::to_string(&shown.input_schema).unwrap();
        assert!(schema.contains("postal_prefix") && schema.contains("express"));
        assert!(!schema.contains("postal code"));
        assert_eq!(
            shown.input_schema.unwrap()["required"],
            json!(["postal_prefix", "quantity"])
        );
        assert!(shown.description.unwrap().ends_with(DEFERRED_NOTE));
    }

    #[test]
    fn always_load_inlines_whatever_the_size() {
        let tools: Vec<Tool> = (0..200).map(fat_tool).collect();
        let options = DisclosureOptions {
            always_load: BTreeSet::from(["broad".to_owned()]),
            ..Default::default()
        };
        assert_eq!(choose_tier("broad", &tools, &options).tier, Tier::Inline);
    }

    #[test]
    fn tight_budget_falls_to_bare_and_floor_reports() {
        let tools: Vec<Tool> = (0..300).map(fat_tool).collect();
        let options = DisclosureOptions {
            budget: Budget::Tokens(1_000),
            ..Default::default()
        };
        let d = choose_tier("verbose", &tools, &options);
        assert_eq!(d.tier, Tier::Bare);
        let diagnostic = d.diagnostic.expect("floor is over budget");
        assert_eq!(diagnostic.rule, Rule::DisclosureBudgetExceeded);
        assert_eq!(diagnostic.origin, "verbose");
        assert!(diagnostic.message.contains("300 tools"));
        assert!(
            diagnostic
                .message
                .contains(&catalogue_floor(&tools).to_string())
        );
        assert!(
            diagnostic
                .message
                .ends_with("Narrow the server with the `tools` filter to go below budget.")
        );
    }

    #[test]
    fn bare_without_floor_diagnostic_when_deferral_fits() {
        // Short descriptions, many parameters: names tier too big, floor fine.
        let wide: Vec<Tool> = (0..20)
            .map(|i| {
                let props: Map<String, Value> = (0..40)
                    .map(|p| (format!("parameter_number_{p}"), json!({"type":"string"})))
                    .collect();
                Tool::new(format!("t{i}"))
                    .with_input_schema(json!({"type":"object","properties":props}))
            })
            .collect();
        let options = DisclosureOptions {
            budget: Budget::Tokens(500),
            ..Default::default()
        };
        let d = choose_tier("wide", &wide, &options);
        assert_eq!(d.tier, Tier::Bare);
        assert!(d.diagnostic.is_none());
        let shown = disclose(&wide[0], Tier::Bare);
        assert_eq!(
            shown.input_schema.as_deref(),
            Some(&json!({"type":"object"}))
        );
        assert_eq!(
            shown.description.as_deref(),
            Some("t0 Full input schema available via mcp__describe_tool.")
        );
    }

    #[test]
    fn deferred_length_matches_the_built_schema() {
        let schemas = [
            None,
            Some(json!(true)),
            Some(json!({"type":"object"})),
            Some(json!({"type":"object","properties":{}})),
            Some(
                json!({"type":"object","properties":{"a\"é😀":{"type":["integer","null"]},"b":{}},"required":["a\"é😀"]}),
            ),
            Some(json!({"properties":{"x":{"type":"string"}},"required":[]})),
            Some(
                json!({"properties":{"x":{"type":[]},"y":{"type":[3,"s"]},"z":7,"w":{"type":{}}},"required":"x"}),
            ),
            Some(json!({"properties":[1],"required":["a"]})),
            Some(json!([{"properties":{}}])),
            Some(
                json!({"properties":{"a\\u0041\n":{"type":"a\"\u{1}"}},"required":[{"k":1},null]}),
            ),
            Some(fat_tool(1).input_schema.unwrap().into_value()),
        ];
        for schema in &schemas {
            let built = compact_json(&deferred_schema(schema.as_ref()));
            assert_eq!(
                deferred_schema_utf16_len(schema.clone().map(Schema::from).as_ref()),
                built.encode_utf16().count(),
                "{built}"
            );
            // Held as stored text: the same length, and the same text.
            let Some(schema) = schema else { continue };
            let text = compact_json(schema);
            let raw = serde_json::value::RawValue::from_string(text.clone()).unwrap();
            let stored = Schema::from_json_text(raw).unwrap();
            assert!(stored.compact().is_some(), "{text}");
            assert_eq!(
                stored.deferred_units(),
                Some(built.encode_utf16().count()),
                "{text}"
            );
            let mut written = String::new();
            measure_compact(&text, Some(&mut written)).unwrap();
            assert_eq!(written, built);
            assert_eq!(
                deferred_schema_utf16_len(Some(&stored)),
                built.encode_utf16().count()
            );
            let shown = deferred(Some(&stored));
            assert!(shown.compact().is_some());
            assert_eq!(serde_json::to_string(&shown).unwrap(), built);
            assert_eq!(shown, Schema::from(deferred_schema(Some(schema))));
            // A deferred schema is its own deferred form, written from its
            // text (no form was written with it).
            let again = deferred(Some(&shown));
            assert!(shown.deferred_units().is_none());
            assert_eq!(serde_json::to_string(&again).unwrap(), built);
        }
    }

    #[test]
    fn utf16_length_counts_code_units() {
        for text in [
            "",
            "plain ascii",
            "é",
            "€uro",
            "😀😀",
            "a\u{0}b\u{7f}",
            "mixed é 😀 \u{ffff}",
        ] {
            assert_eq!(utf16_len(text), text.encode_utf16().count(), "{text:?}");
        }
    }

    #[test]
    fn json_length_is_the_serialisers() {
        let values = [
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(-0.0),
            json!(1.0),
            json!(0.1),
            json!(-1.5e-300),
            json!(1.5e300),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(""),
            json!("plain"),
            json!("\"\\/\u{8}\u{9}\n\u{c}\r\u{0}\u{1f}\u{7f}é€😀\u{2028}"),
            json!([]),
            json!([1, [2, {}], {"a": []}]),
            json!({"é😀\n": {"x": [null, "\u{1}"]}, "b": 2.5}),
            fat_tool(3).input_schema.unwrap().into_value(),
        ];
        for value in &values {
            let text = serde_json::to_string(value).unwrap();
            assert_eq!(json_utf16_len(value), text.encode_utf16().count(), "{text}");
        }
    }

    #[test]
    fn deferred_schema_edge_cases() {
        assert_eq!(deferred_schema(None), json!({"type":"object"}));
        assert_eq!(
            deferred_schema(Some(&json!(true))),
            json!({"type":"object"})
        );
        assert_eq!(
            deferred_schema(Some(&json!({"type":"object","properties":[1]}))),
            json!({"type":"object"})
        );
        assert_eq!(
            deferred_schema(Some(&json!({"properties":{"x":{}, "y": 5},"required":[]}))),
            json!({"type":"object","properties":{"x":{"type":"string"},"y":{"type":"string"}}})
        );
    }

    #[test]
    fn describe_tool_shape() {
        let d = describe_tool_definition();
        assert_eq!(d.name, "mcp__describe_tool");
        assert_eq!(d.input_schema.unwrap()["required"], json!(["tool"]));
        assert_eq!(
            unknown_tool_message("nope"),
            "Unknown MCP tool \"nope\". Use a qualified name like server__tool."
        );
    }

    #[test]
    fn budget_parses_auto_or_number() {
        assert_eq!(
            serde_json::from_value::<Budget>(json!(500)).unwrap(),
            Budget::Tokens(500)
        );
        assert_eq!(
            serde_json::from_value::<Budget>(json!("auto")).unwrap(),
            Budget::Auto
        );
        assert!(serde_json::from_value::<Budget>(json!("lots")).is_err());
        assert!(serde_json::from_value::<Budget>(json!(-1)).is_err());
        assert_eq!(serde_json::to_value(Budget::Auto).unwrap(), json!("auto"));
        assert_eq!(Budget::Auto.tokens(), DEFAULT_DISCLOSURE_BUDGET_TOKENS);
    }
}
