//! A tool's JSON Schema, held as a value or as the compact JSON text it was
//! read from.
//!
//! A wake reads thousands of cached definitions from the store and shows
//! most of them deferred: building a `Value` tree for every schema, most of
//! which nothing reads before the next listing replaces it, was a third of
//! the store read. A schema read from stored text ([`CachedTools`](crate::tool::CachedTools)) keeps
//! that text when it is exactly what serde_json writes for its own parse
//! (checked byte by byte, `measure_compact`), and is parsed on first read
//! ([`Schema::value`]); anything else is parsed at once, as before. So a
//! schema means the same whichever way it is held: it serialises to the
//! same bytes, compares equal by value, and its length (the disclosure
//! estimate) is the text's.
//!
//! The same pass over a stored input schema writes its deferred form (each
//! property's name and type, and `required`), which a deferred tier then
//! shows by sharing that text: writing it again from the stored text, and
//! serde_json's check of it as a `RawValue`, were half a wake's projection.

use std::collections::HashSet;
use std::fmt;
use std::ops::{Deref, Range};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One JSON Schema of a tool (`inputSchema`, `outputSchema`). Reads as a
/// [`Value`] (it dereferences to one); see the module documentation for
/// why it may hold text.
#[derive(Clone)]
pub struct Schema(Repr);

#[derive(Clone)]
enum Repr {
    /// A parsed value, shared by the schema's clones (a definition shown
    /// inline and its listing's tool, for one): each clone used to be a
    /// deep copy, 8 MB at 5 000 served tools; a change copies it first.
    Value(Arc<Value>),
    /// Text that is exactly `serde_json::to_string` of its own parse
    /// (held to that by `measure_compact`), parsed on first read.
    Compact {
        text: Box<RawValue>,
        /// Its UTF-16 length, counted while checking it.
        units: usize,
        /// Its deferred form, written in the same pass (the tier decision
        /// reads its length for every tool, a deferred tier shows it);
        /// `None` for a schema read without it (an output schema).
        deferred: Option<Deferred>,
        parsed: OnceLock<Arc<Value>>,
    },
    /// Compact text the catalogue wrote itself (a deferred schema, from
    /// slices of checked text: tests hold it to serde_json's output),
    /// shared with the stored schema it was written from when it was
    /// written as that was read. Not a `RawValue`: serde_json would scan it
    /// again to make one, and only serialising needs one.
    Built {
        text: Arc<str>,
        /// Its UTF-16 length.
        units: usize,
        parsed: OnceLock<Arc<Value>>,
    },
}

/// A schema's deferred form (`disclosure::deferred_schema`) as compact
/// JSON text, with its UTF-16 length.
#[derive(Clone)]
struct Deferred {
    text: Arc<str>,
    units: usize,
}

impl Schema {
    /// The schema as a value (parsed now if it is held as text).
    pub fn value(&self) -> &Value {
        self.shared()
    }

    /// The value, as the clones of this schema share it.
    fn shared(&self) -> &Arc<Value> {
        let (text, parsed) = match &self.0 {
            Repr::Value(value) => return value,
            Repr::Compact { text, parsed, .. } => (text.get(), parsed),
            Repr::Built { text, parsed, .. } => (&**text, parsed),
        };
        parsed.get_or_init(|| {
            // Checked as compact JSON of at most `MAX_DEPTH` levels when
            // it was stored (or written so by the catalogue, as tests
            // hold), so it parses; were it ever not to, a schema that
            // admits nothing fails closed.
            Arc::new(serde_json::from_str(text).unwrap_or(Value::Bool(false)))
        })
    }

    /// The schema as a value to change (no longer held as text). A value
    /// this schema's clones share is copied first: a change never reaches
    /// another clone.
    pub fn value_mut(&mut self) -> &mut Value {
        if !matches!(self.0, Repr::Value(_)) {
            *self = Schema(Repr::Value(Arc::clone(self.shared())));
        }
        match &mut self.0 {
            Repr::Value(value) => Arc::make_mut(value),
            Repr::Compact { .. } | Repr::Built { .. } => unreachable!("made a value just above"),
        }
    }

    /// A copy of the schema as a JSON object, `None` when it is not one.
    /// A schema held as text is parsed straight into the copy and stays
    /// text: a caller that needs an object of its own (an MCP tool's
    /// `inputSchema`) does not leave a second parse behind in this one.
    pub fn to_object(&self) -> Option<Map<String, Value>> {
        let (text, parsed) = match &self.0 {
            Repr::Value(value) => return value.as_object().cloned(),
            Repr::Compact { text, parsed, .. } => (text.get(), parsed),
            Repr::Built { text, parsed, .. } => (&**text, parsed),
        };
        match parsed.get() {
            Some(value) => value.as_object().cloned(),
            None => serde_json::from_str(text).ok(),
        }
    }

    /// Whether the schema is JSON `null` (read without parsing a schema
    /// held as text: compact text of `null` is exactly `null`).
    pub fn is_null(&self) -> bool {
        match &self.0 {
            Repr::Value(value) => value.is_null(),
            Repr::Compact { text, .. } => text.get() == "null",
            Repr::Built { text, .. } => &**text == "null",
        }
    }

    /// The schema as an owned value.
    pub fn into_value(self) -> Value {
        let shared = Arc::clone(self.shared());
        drop(self);
        Arc::unwrap_or_clone(shared)
    }

    /// A schema read from JSON text: kept as that text when it is what
    /// serde_json writes for its own parse, else parsed now (an error is
    /// the parse's). Read as a tool's input schema: its deferred form is
    /// written in the same pass.
    pub fn from_json_text(text: Box<RawValue>) -> serde_json::Result<Schema> {
        Schema::read(text, Some(&mut String::new()))
    }

    /// [`Schema::from_json_text`], writing the schema's deferred form in
    /// the same pass only when `outline` is given (a scratch buffer, reused
    /// across schemas): for an input schema, not an output schema.
    pub(crate) fn read(
        text: Box<RawValue>,
        mut outline: Option<&mut String>,
    ) -> serde_json::Result<Schema> {
        match measure_compact(text.get(), outline.as_deref_mut()) {
            Some(measure) => {
                let deferred = outline.map(|written| Deferred {
                    text: Arc::from(written.as_str()),
                    units: measure.deferred_units,
                });
                Ok(Schema(Repr::Compact {
                    text,
                    units: measure.units,
                    deferred,
                    parsed: OnceLock::new(),
                }))
            }
            None => serde_json::from_str::<Value>(text.get()).map(Schema::from),
        }
    }

    /// The compact JSON text the schema is held as, and its UTF-16 length,
    /// when it is held as text (which is then exactly what serde_json
    /// writes for [`Schema::value`]: checked when stored text was read,
    /// built so by the catalogue otherwise).
    pub(crate) fn compact(&self) -> Option<(&str, usize)> {
        match &self.0 {
            Repr::Value(_) => None,
            Repr::Compact { text, units, .. } => Some((text.get(), *units)),
            Repr::Built { text, units, .. } => Some((text, *units)),
        }
    }

    /// The UTF-16 length of this schema's deferred form as compact JSON
    /// (`disclosure::deferred_schema`), when it was written as the schema
    /// was read from stored text.
    pub(crate) fn deferred_units(&self) -> Option<usize> {
        match &self.0 {
            Repr::Compact {
                deferred: Some(deferred),
                ..
            } => Some(deferred.units),
            _ => None,
        }
    }

    /// This schema's deferred form, when it was written as the schema was
    /// read from stored text: shares that text, copies nothing.
    pub(crate) fn deferred_form(&self) -> Option<Schema> {
        match &self.0 {
            Repr::Compact {
                deferred: Some(Deferred { text, units }),
                ..
            } => Some(Schema::built(Arc::clone(text), *units)),
            _ => None,
        }
    }

    /// This schema's deferred form as compact text, when it is held as
    /// text: [`Schema::deferred_form`], else written now by the pass that
    /// writes it on reading. `None` for a schema held as a value.
    pub(crate) fn write_deferred_form(&self) -> Option<Schema> {
        if let Some(shared) = self.deferred_form() {
            return Some(shared);
        }
        let (text, _) = self.compact()?;
        let mut written = String::new();
        let measure = measure_compact(text, Some(&mut written))?;
        Some(Schema::built(Arc::from(written), measure.deferred_units))
    }

    fn built(text: Arc<str>, units: usize) -> Schema {
        debug_assert!(
            serde_json::from_str::<&RawValue>(&text).is_ok(),
            "the catalogue wrote a schema that is not JSON: {text}"
        );
        Schema(Repr::Built {
            text,
            units,
            parsed: OnceLock::new(),
        })
    }
}

impl Deref for Schema {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl std::ops::DerefMut for Schema {
    fn deref_mut(&mut self) -> &mut Value {
        self.value_mut()
    }
}

impl From<Value> for Schema {
    fn from(value: Value) -> Self {
        Schema(Repr::Value(Arc::new(value)))
    }
}

impl From<Schema> for Value {
    fn from(schema: Schema) -> Self {
        schema.into_value()
    }
}

/// Equal when the values are, however each is held (two texts differing
/// only in key order are equal, as their values are).
impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        if let (Some((a, _)), Some((b, _))) = (self.compact(), other.compact())
            && a == b
        {
            return true;
        }
        self.value() == other.value()
    }
}

impl PartialEq<Value> for Schema {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.value(), f)
    }
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Value(value) => value.serialize(serializer),
            // The same bytes the value would serialise to.
            Repr::Compact { text, .. } => text.serialize(serializer),
            // Checked only here, borrowed: most built texts are never
            // serialised (MCP's copy of a tool is made from the value).
            Repr::Built { text, .. } => {
                let raw: &RawValue =
                    serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
                raw.serialize(serializer)
            }
        }
    }
}

/// Deserialised as a value: only [`CachedTools`](crate::tool::CachedTools) keeps the text.
impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Schema::from)
    }
}

/// Nesting deeper than this is never kept as text (serde_json refuses 128
/// levels; a schema this deep is parsed at once, as before).
const MAX_DEPTH: usize = 64;

/// What [`measure_compact`] finds in compact schema text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Measure {
    /// The text's UTF-16 length.
    pub units: usize,
    /// The UTF-16 length of the schema's deferred form as compact JSON
    /// (`disclosure::deferred_schema`: each property's name and kept type,
    /// and `required`), measured from the slices that form keeps.
    pub deferred_units: usize,
}

/// The lengths of the deferred form's fixed parts (its shape is
/// `disclosure::deferred_schema`'s; a test there holds the two together).
const BARE_LEN: usize = BARE_SCHEMA.len();
const OUTLINE_LEN: usize = r#"{"type":"object","properties":{}}"#.len();
const PROPERTY_LEN: usize = r#":{"type":}"#.len();
const REQUIRED_LEN: usize = r#","required":"#.len();
/// The type kept for a property that names none usable.
const STRING_TYPE: &str = r#""string""#;
/// `{"type":"object"}`: the schema of a tool that published none, of the
/// bare tier, and the deferred form of a schema without `properties`.
pub(crate) const BARE_SCHEMA: &str = r#"{"type":"object"}"#;

/// `text`'s lengths ([`Measure`]) when it is exactly what
/// `serde_json::to_string` writes for `serde_json::from_str(text)` (with
/// key order preserved): no whitespace between tokens, strings escaped as
/// serde_json escapes them (`\"`, `\\`, `\b\t\n\f\r`, other control
/// characters as lowercase `\u00xx`, nothing else), no key twice in one
/// object (a parse keeps one), integers of at most 18 digits and not `-0`
/// (no fraction or exponent: those may print differently), at most
/// [`MAX_DEPTH`] levels. `None` for anything else, including text that is
/// not JSON. With `outline`, the deferred form is written there too (its
/// contents are then meaningful only when this returns `Some`).
pub(crate) fn measure_compact(text: &str, outline: Option<&mut String>) -> Option<Measure> {
    let mut scan = Scan {
        text,
        bytes: text.as_bytes(),
        at: 0,
        units: 0,
        outline,
    };
    let deferred_units = scan.schema()?;
    (scan.at == scan.bytes.len()).then_some(Measure {
        units: scan.units,
        deferred_units,
    })
}

struct Scan<'t, 'o> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
    units: usize,
    /// Where the deferred form is written, when it is wanted: slices of
    /// `text` (each already what serde_json writes for the part it holds)
    /// between the form's fixed parts.
    outline: Option<&'o mut String>,
}

impl<'t> Scan<'t, '_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.bytes.get(self.at..end)? == word).then_some(())?;
        self.at = end;
        self.units += word.len();
        Some(())
    }

    /// A whole schema; returns the length of its deferred form, read from
    /// the same pass: the top object's `properties` (each property's name
    /// and kept type) and a non-empty `required`.
    fn schema(&mut self) -> Option<usize> {
        if self.peek()? != b'{' {
            self.value(0)?;
            self.write_bare();
            return Some(BARE_LEN);
        }
        let mut properties = None;
        let mut required = None;
        self.object(1, |scan, key, _| {
            match key {
                r#""properties""# if scan.peek() == Some(b'{') => {
                    properties = Some(scan.properties()?);
                }
                r#""required""# => {
                    let (start, before) = (scan.at, scan.units);
                    scan.value(1)?;
                    // A non-empty array (compact: longer than `[]`).
                    if scan.bytes.get(start) == Some(&b'[') && scan.at - start > 2 {
                        required = Some((start..scan.at, scan.units - before));
                    }
                }
                _ => scan.value(1)?,
            }
            Some(())
        })?;
        let Some(kept) = properties else {
            self.write_bare();
            return Some(BARE_LEN);
        };
        let text = self.text;
        if let Some(out) = self.outline.as_deref_mut() {
            // `properties` wrote the form up to the end of its own map.
            if let Some((span, _)) = &required {
                out.push_str(r#","required":"#);
                out.push_str(text.get(span.clone())?);
            }
            out.push('}');
        }
        let required = required.map_or(0, |(_, units)| REQUIRED_LEN + units);
        Some(OUTLINE_LEN + kept + required)
    }

    fn write_bare(&mut self) {
        if let Some(out) = self.outline.as_deref_mut() {
            out.clear();
            out.push_str(BARE_SCHEMA);
        }
    }

    /// The top object's `properties`; returns the length of what the
    /// deferred form keeps of them, separators included, and writes the
    /// form up to their end.
    fn properties(&mut self) -> Option<usize> {
        if let Some(out) = self.outline.as_deref_mut() {
            out.clear();
            out.push_str(r#"{"type":"object","properties":{"#);
        }
        let mut units = 0;
        let mut count = 0;
        self.object(2, |scan, name, name_units| {
            let (kept_units, kept) = scan.kept_type()?;
            units += usize::from(count > 0) + name_units + PROPERTY_LEN + kept_units;
            let text = scan.text;
            if let Some(out) = scan.outline.as_deref_mut() {
                if count > 0 {
                    out.push(',');
                }
                out.push_str(name);
                out.push_str(r#":{"type":"#);
                out.push_str(match kept {
                    Some(span) => text.get(span)?,
                    None => STRING_TYPE,
                });
                out.push('}');
            }
            count += 1;
            Some(())
        })?;
        if let Some(out) = self.outline.as_deref_mut() {
            out.push('}');
        }
        Some(units)
    }

    /// One property's schema; returns the length of the type the deferred
    /// form keeps for it and where it is in the text (`None`: `"string"`):
    /// its `type` string, the first item of a `type` array when that is a
    /// string, else `"string"`.
    fn kept_type(&mut self) -> Option<(usize, Option<Range<usize>>)> {
        if self.peek()? != b'{' {
            self.value(2)?;
            return Some((STRING_TYPE.len(), None));
        }
        let mut kept = (STRING_TYPE.len(), None);
        self.object(3, |scan, key, _| {
            let (start, before) = (scan.at, scan.units);
            scan.value(3)?;
            if key == r#""type""# {
                kept = match scan.bytes.get(start..start.checked_add(2)?) {
                    Some([b'"', _]) => (scan.units - before, Some(start..scan.at)),
                    Some([b'[', b'"']) => {
                        let mut first = Scan {
                            text: scan.text,
                            bytes: scan.bytes,
                            at: start + 1,
                            units: 0,
                            outline: None,
                        };
                        first.string()?;
                        (first.units, Some(start + 1..first.at))
                    }
                    _ => (STRING_TYPE.len(), None),
                };
            }
            Some(())
        })?;
        Some(kept)
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth + 1, |scan, _, _| scan.value(depth + 1)),
            b'[' => self.array(depth + 1),
            b'"' => self.string(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    /// An object at `depth`: `entry` is called with each key (as written,
    /// quotes included) and its UTF-16 length, and must read its value.
    fn object(
        &mut self,
        depth: usize,
        mut entry: impl FnMut(&mut Self, &'t str, usize) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.literal(b"{")?;
        if self.peek()? == b'}' {
            return self.literal(b"}");
        }
        // Keys as written: escapes are canonical here, so equal text is
        // equal keys and different text different ones. A schema's maps
        // are small: the first few are compared, not hashed or allocated.
        let mut few: [&str; FEW_KEYS] = [""; FEW_KEYS];
        let mut count = 0;
        let mut many: Option<HashSet<&str>> = None;
        loop {
            let (start, before) = (self.at, self.units);
            self.string()?;
            let key = self.text.get(start..self.at)?;
            if count < FEW_KEYS {
                if few[..count].contains(&key) {
                    return None;
                }
                few[count] = key;
            } else if !many
                .get_or_insert_with(|| few.into_iter().collect())
                .insert(key)
            {
                return None;
            }
            count += 1;
            let key_units = self.units - before;
            self.literal(b":")?;
            entry(self, key, key_units)?;
            match self.peek()? {
                b',' => self.literal(b",")?,
                b'}' => return self.literal(b"}"),
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.literal(b"[")?;
        if self.peek()? == b']' {
            return self.literal(b"]");
        }
        loop {
            self.value(depth)?;
            match self.peek()? {
                b',' => self.literal(b",")?,
                b']' => return self.literal(b"]"),
                _ => return None,
            }
        }
    }

    /// A string, quotes included.
    fn string(&mut self) -> Option<()> {
        self.literal(b"\"")?;
        loop {
            // A run of plain characters first: whole words of plain ASCII,
            // then a table lookup a byte, in locals (most of a schema's
            // bytes are its descriptions).
            let rest = self.bytes.get(self.at..)?;
            let mut run = plain_ascii_words(rest);
            let mut units = run;
            for &b in rest.get(run..)? {
                let unit = STRING_UNITS[usize::from(b)];
                if unit == SPECIAL {
                    break;
                }
                units += usize::from(unit);
                run += 1;
            }
            self.at += run;
            self.units += units;
            let b = self.peek()?;
            self.at += 1;
            match b {
                b'"' => {
                    self.units += 1;
                    return Some(());
                }
                b'\\' => {
                    let escape = self.peek()?;
                    self.at += 1;
                    match escape {
                        b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r' => self.units += 2,
                        b'u' => {
                            // Only a control character serde_json has no
                            // short escape for: `\u00` and lowercase hex.
                            let hex = self.bytes.get(self.at..self.at.checked_add(4)?)?;
                            let low = match hex {
                                [b'0', b'0', b'0', low] => hex_digit(*low)?,
                                [b'0', b'0', b'1', low] => 16 + hex_digit(*low)?,
                                _ => return None,
                            };
                            if matches!(low, 0x08 | 0x09 | 0x0A | 0x0C | 0x0D) {
                                return None;
                            }
                            self.at += 4;
                            self.units += 6;
                        }
                        _ => return None,
                    }
                }
                // Unescaped control characters are not JSON.
                _ => return None,
            }
        }
    }

    fn integer(&mut self) -> Option<()> {
        let negative = self.peek()? == b'-';
        if negative {
            self.at += 1;
        }
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let digits = self.bytes.get(start..self.at)?;
        let plain = match digits {
            [] => false,
            [b'0'] => !negative,
            [b'0', ..] => false,
            _ => digits.len() <= 18,
        };
        // A fraction or an exponent follows: not kept as text.
        if !plain || matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.units += digits.len() + usize::from(negative);
        Some(())
    }
}

/// How many leading bytes of `bytes`, in whole eight-byte words, are
/// printable ASCII other than `"` and `\`: the part of a JSON string's
/// content that is one UTF-16 unit a byte and holds no escape, checked a
/// word at a time (a schema's descriptions are mostly such runs).
pub(crate) fn plain_ascii_words(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Whether any byte of `w` is below `n` (exact for `n` ≤ 0x80).
    let below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGH != 0;
    let mut run = 0;
    while let Some(word) = bytes.get(run..).and_then(<[u8]>::first_chunk::<8>) {
        let w = u64::from_le_bytes(*word);
        if w & HIGH != 0
            || below(w, 0x20)
            || below(w ^ (ONES * u64::from(b'"')), 1)
            || below(w ^ (ONES * u64::from(b'\\')), 1)
        {
            break;
        }
        run += 8;
    }
    run
}

/// Keys of one object compared one by one before they are hashed.
const FEW_KEYS: usize = 16;

/// What a non-ASCII byte of UTF-8 text adds to its UTF-16 length: a
/// continuation byte nothing, a 4-byte lead two (a surrogate pair), any
/// other lead one.
pub(crate) const fn utf16_units_of_utf8_byte(byte: usize) -> u8 {
    match byte {
        0x80..=0xBF => 0,
        0xF0..=0xFF => 2,
        _ => 1,
    }
}

/// [`STRING_UNITS`] of a byte that ends a plain run: `"`, `\` or a control
/// character.
const SPECIAL: u8 = 3;

/// What one byte inside a string adds to the text's UTF-16 length: a
/// continuation byte nothing, a 4-byte lead two (a surrogate pair), any
/// other one; [`SPECIAL`] for the bytes that end a plain run.
const STRING_UNITS: [u8; 256] = {
    let mut units = [1u8; 256];
    let mut b = 0;
    while b < 0x20 {
        units[b] = SPECIAL;
        b += 1;
    }
    units[b'"' as usize] = SPECIAL;
    units[b'\\' as usize] = SPECIAL;
    let mut b = 0x80;
    while b < 0x100 {
        units[b] = utf16_units_of_utf8_byte(b);
        b += 1;
    }
    units
};

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{CachedTools, Tool};
    use serde_json::json;

    fn kept(text: &str) -> bool {
        let raw = RawValue::from_string(text.to_owned()).unwrap();
        Schema::from_json_text(raw).unwrap().compact().is_some()
    }

    #[test]
    fn serde_jsons_own_compact_text_is_kept_and_counted() {
        for value in [
            json!({"type": "object"}),
            json!({"b": 1, "a": [true, false, null, -12, 0], "é😀\"\\\n\u{1f}\u{7f}/": {}}),
            json!([]),
            json!("\u{8}\t\n\u{c}\r\u{0}"),
            json!(123456789012345678_i64),
        ] {
            let text = serde_json::to_string(&value).unwrap();
            assert_eq!(
                measure_compact(&text, None).map(|m| m.units),
                Some(text.encode_utf16().count()),
                "{text}"
            );
            let raw = RawValue::from_string(text.clone()).unwrap();
            let schema = Schema::from_json_text(raw).unwrap();
            assert!(schema.compact().is_some(), "{text}");
            assert_eq!(schema, Schema::from(value.clone()));
            assert_eq!(serde_json::to_string(&schema).unwrap(), text);
            assert_eq!(schema.into_value(), value);
        }
    }

    #[test]
    fn a_clone_shares_its_value_until_one_of_them_is_changed() {
        let original =
            Schema::from(json!({"type": "object", "properties": {"q": {"type": "string"}}}));
        let mut changed = original.clone();
        assert!(
            std::ptr::eq(original.value(), changed.value()),
            "a clone copies nothing"
        );
        changed["properties"]["q"]["type"] = json!("integer");
        assert_eq!(
            original["properties"]["q"]["type"], "string",
            "the original is untouched"
        );
        assert_eq!(changed["properties"]["q"]["type"], "integer");
        // Text parsed on first read is shared by the clones made after.
        let text = Schema::from_json_text(
            serde_json::value::to_raw_value(&json!({"type": "object"})).unwrap(),
        )
        .unwrap();
        let parsed = text.value();
        assert!(std::ptr::eq(parsed, text.clone().value()));
        // A change to a clone of text-held schema reaches neither the
        // text nor the parse the other clones read.
        let mut edited = text.clone();
        edited["type"] = json!("string");
        assert_eq!(text.value(), &json!({"type": "object"}));
        assert_eq!(
            serde_json::to_string(&text).ok().as_deref(),
            Some(r#"{"type":"object"}"#)
        );
        assert_eq!(edited.value(), &json!({"type": "string"}));
        // Taken out of a shared schema, the value is a copy.
        let mut taken = Value::from(original.clone());
        taken["type"] = json!("array");
        assert_eq!(original["type"], "object");
    }

    #[test]
    fn an_object_copy_leaves_a_schema_held_as_text_unparsed() {
        let value = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let text = serde_json::to_string(&value).unwrap();
        let schema = Schema::from_json_text(RawValue::from_string(text).unwrap()).unwrap();
        assert_eq!(schema.to_object().map(Value::Object), Some(value.clone()));
        let Repr::Compact { parsed, .. } = &schema.0 else {
            panic!("held as text");
        };
        assert!(parsed.get().is_none(), "parsed into the schema itself");
        assert_eq!(
            Schema::from(value.clone()).to_object().map(Value::Object),
            Some(value)
        );
        let null = Schema::from_json_text(RawValue::from_string("null".into()).unwrap()).unwrap();
        assert!(null.is_null() && Schema::from(Value::Null).is_null() && !schema.is_null());
        let boolean = Schema::from_json_text(RawValue::from_string("true".into()).unwrap());
        assert_eq!(boolean.unwrap().to_object(), None);
        assert_eq!(Schema::from(json!([1])).to_object(), None);
    }

    #[test]
    fn text_serde_json_would_write_otherwise_is_parsed_at_once() {
        for text in [
            r#"{ "type": "object" }"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\u000a"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e2}"#,
            r#"{"a":-0}"#,
            r#"{"a":1234567890123456789}"#,
        ] {
            assert!(!kept(text), "{text}");
            let raw = RawValue::from_string(text.to_owned()).unwrap();
            let schema = Schema::from_json_text(raw).unwrap();
            let parsed: Value = serde_json::from_str(text).unwrap();
            assert_eq!(schema.value(), &parsed);
            assert_eq!(
                serde_json::to_string(&schema).unwrap(),
                serde_json::to_string(&parsed).unwrap()
            );
        }
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(!kept(&deep));
        let shallow = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(kept(&shallow));
        // Deeper than serde_json parses: refused as before, not kept.
        let too_deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let raw: Result<Box<RawValue>, _> = serde_json::from_str(&too_deep);
        if let Ok(raw) = raw {
            assert!(Schema::from_json_text(raw).is_err());
        }
    }

    #[test]
    fn plain_ascii_is_found_in_whole_words_only() {
        assert_eq!(plain_ascii_words(b""), 0);
        assert_eq!(plain_ascii_words(b"abcdefg"), 0);
        assert_eq!(plain_ascii_words(b"abcdefgh"), 8);
        assert_eq!(plain_ascii_words(b"abcdefgh ~\x7f!#$%&xyz"), 16);
        for stop in [b'"', b'\\', 0x00, 0x1F, 0x80, 0xC3, 0xFF] {
            for at in 0..16 {
                let mut bytes = vec![b'a'; 24];
                bytes[at] = stop;
                assert_eq!(plain_ascii_words(&bytes), at / 8 * 8, "{stop:#x} at {at}");
            }
        }
    }

    #[test]
    fn the_deferred_length_is_measured_in_the_same_pass() {
        // Only the top object's `properties` and `required` count: the
        // same keys deeper down, or a `type` outside a property, do not.
        for value in [
            json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}}}),
            json!({"type": "string", "required": ["x"], "items": {"properties": {"x": {}}}}),
            json!({"properties": {"t\"ype": {"type\"": "x", "type": ["nul\u{1}l", 3]}, "é": "x"}, "required": [[]]}),
            json!({"properties": {}, "required": []}),
            json!([{"properties": {"a": {"type": "string"}}}]),
            json!({"required": ["b", "a"], "title": "x", "properties": {"a": 1, "b": {"type": [null, "x"]}, "c": {"type": ["y", 2]}}}),
            json!({"properties": "no", "required": ["a"]}),
        ] {
            let text = serde_json::to_string(&value).unwrap();
            let deferred = crate::disclosure::deferred_schema(Some(&value));
            let expected = serde_json::to_string(&deferred)
                .unwrap()
                .encode_utf16()
                .count();
            assert_eq!(
                measure_compact(&text, None).map(|m| m.deferred_units),
                Some(expected),
                "{text}"
            );
            // Written in the same pass: exactly serde_json's text of it.
            let mut outline = "left over".to_owned();
            measure_compact(&text, Some(&mut outline));
            assert_eq!(outline, serde_json::to_string(&deferred).unwrap());
        }
    }

    #[test]
    fn a_deferred_form_written_on_reading_is_shared_not_copied() {
        let text = r#"{"type":"object","properties":{"q":{"type":"string","description":"d"}},"required":["q"]}"#;
        let schema = Schema::from_json_text(RawValue::from_string(text.into()).unwrap()).unwrap();
        let Repr::Compact {
            deferred: Some(Deferred { text: written, .. }),
            ..
        } = &schema.0
        else {
            panic!("read without its deferred form");
        };
        let form = schema.deferred_form().unwrap();
        let Repr::Built { text: shown, .. } = &form.0 else {
            panic!("not held as the written text");
        };
        assert!(Arc::ptr_eq(written, shown));
        assert_eq!(
            serde_json::to_string(&form).unwrap(),
            r#"{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}"#
        );
        assert_eq!(form.value()["required"], json!(["q"]));
        // An output schema is read without one.
        let output = Schema::read(RawValue::from_string(text.into()).unwrap(), None).unwrap();
        assert!(output.compact().is_some() && output.deferred_form().is_none());
    }

    #[test]
    fn a_cached_listing_writes_each_input_schemas_own_deferred_form() {
        // The first input schema fails the check after its `properties`
        // (a fraction): parsed, no form; the scratch it wrote to must not
        // reach the next tool's form.
        let text = r#"[{"name":"a","inputSchema":{"properties":{"long_name_first":{"type":"integer"}},"maximum":1.5}},
            {"name":"b","inputSchema":{"required":["q"],"properties":{"q":{"type":"string"}}},"outputSchema":{"properties":{"r":{"type":"number"}}}},
            {"name":"c","inputSchema":{"type":"object"}}]"#;
        let cached: CachedTools = serde_json::from_str(text).unwrap();
        let [a, b, c] = &cached.0[..] else {
            panic!("three tools: {cached:?}");
        };
        let input = |tool: &Tool| tool.input_schema.clone().unwrap();
        assert!(input(a).compact().is_none() && input(a).deferred_form().is_none());
        let form =
            |tool: &Tool| serde_json::to_string(&input(tool).deferred_form().unwrap()).unwrap();
        assert_eq!(
            form(b),
            r#"{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}"#
        );
        assert_eq!(form(c), r#"{"type":"object"}"#);
        let output = b.output_schema.as_ref().unwrap();
        assert!(output.compact().is_some() && output.deferred_form().is_none());
    }

    #[test]
    fn a_schema_held_as_text_changes_as_a_value() {
        let raw = RawValue::from_string(r#"{"type":"object"}"#.to_owned()).unwrap();
        let mut schema = Schema::from_json_text(raw).unwrap();
        schema["type"] = json!("string");
        assert!(schema.compact().is_none());
        assert_eq!(
            serde_json::to_string(&schema).unwrap(),
            r#"{"type":"string"}"#
        );
    }

    #[test]
    fn a_cached_listing_reads_as_a_listing_does() {
        let text = r#"[{"name":"a","inputSchema":{"type":"object","properties":{"x":{"type":"string"}}},"outputSchema":{ "type": "object" },"annotations":{"readOnlyHint":true,"x":1},"_meta":{"k":[1]},"extra":2},
            {"name":"b","inputSchema":null,"title":"B"}]"#;
        let cached: CachedTools = serde_json::from_str(text).unwrap();
        let listed: Vec<Tool> = serde_json::from_str(text).unwrap();
        assert_eq!(cached.0, listed);
        assert!(
            cached.0[0]
                .input_schema
                .as_ref()
                .unwrap()
                .compact()
                .is_some()
        );
        assert!(
            cached.0[0]
                .output_schema
                .as_ref()
                .unwrap()
                .compact()
                .is_none()
        );
        assert_eq!(
            serde_json::to_string(&cached.0).unwrap(),
            serde_json::to_string(&listed).unwrap()
        );
        assert!(serde_json::from_str::<CachedTools>(r#"[{"title":"no name"}]"#).is_err());
    }
}
