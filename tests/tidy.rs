//! Tidy: the repository's layering rules, checked by reading the sources
//! from disk (in the style of TigerBeetle's `tidy.zig`). A rule stated in an
//! ADR and never checked is a hope; these fail the test suite naming the file
//! and line that broke them (docs/adr/0001-architecture.md).
//!
//! The rules:
//! 1. Transports are codecs over the Iggy layer: nothing under
//!    `core/server/src/tcp/` mentions `crate::http`, nothing under
//!    `core/server/src/http/` mentions `crate::tcp`, and nothing under
//!    `core/server/src/iggy/` mentions either (in code, grouped `use`s and
//!    `super::` paths included, and in comments).
//! 2. Only the storage crate touches `std::fs`, apart from the paths in
//!    `STD_FS_ALLOWED`, each with its reason (tools and tests that stand
//!    outside the server). Comments and string literals do not count.
//! 3. Every on-disk name is spelled in `core/server/src/layout.rs` only: no
//!    string literal elsewhere in `core/server/src` spells one of the names
//!    layout.rs declares (exactly, as a dotted file name or suffix at the end
//!    of a word, or as a directory of a path-like literal), and no `&str`
//!    constant named like a name (`*_FILE`, `*_DIR`, `*_SUFFIX`, `*_EXT`,
//!    `*_MARKER`) is declared outside layout.rs, apart from `NAMES_ALLOWED`.
//! 4. The production engine takes nothing from the simulator: no
//!    `sluice_storage::sim` path, and none of the items `sluice_storage`
//!    re-exports from `sim` (read from core/storage/src/lib.rs), in
//!    `core/server/src` outside `#[cfg(test)]` items.
//!
//! Invariants:
//! - Each rule is a checker over one file's path and text, so each has a
//!   unit test below that runs it on a small in-memory violation and requires
//!   it to be reported (its teeth), and one that runs it on the repository.
//! - An allow-list entry that no longer matches anything fails the test: the
//!   lists only shrink by being edited, never by going stale.
//! - The checks read the sources through a small Rust lexer (comments,
//!   strings, raw strings, char literals, lifetimes), not through regular
//!   expressions, so a string or comment is never taken for code.

use std::fmt;
use std::path::{Path, PathBuf};

// ---- allow-lists --------------------------------------------------------

/// Paths (prefixes, relative to the repository root) that may use `std::fs`.
const STD_FS_ALLOWED: &[(&str, &str)] = &[
    (
        "core/storage/",
        "the disk boundary itself: DiskStorage is the one production door to std::fs (ADR 0001)",
    ),
    (
        "core/powercut/",
        "a FUSE file system that keeps its data in a real backing directory, below the server's \
         storage trait, to cut power under the shipped binary (ADR 0012)",
    ),
    (
        "core/testkit/",
        "test fixtures: the launched server's log file and the soak's work directory, outside \
         any data directory the engine uses",
    ),
    (
        "core/cli/src/bench/",
        "sluice bench: /proc figures, raw-disk reference writes and the report directory, \
         measured beside the engine, never through it",
    ),
    (
        "core/cli/src/soak/",
        "sluice soak: work and data directories and the log of the server process it launches \
         and kills (the server itself still goes through DiskStorage)",
    ),
    (
        "core/cli/tests/",
        "tests of the binary: they read its log and prepare directories from outside",
    ),
    (
        "tests/",
        "integration suites inspect and damage data directories from outside the server, and \
         this test reads the sources",
    ),
];

/// Files of `core/server/src` that may spell a directory name of the
/// layout in a path-like literal, or declare a name-like constant.
const NAMES_ALLOWED: &[(&str, &str)] = &[
    (
        "core/server/src/http/mod.rs",
        "the route table: Iggy's URL paths (/streams/{stream_id}/topics/...) share words with \
         the data directory's layout; they are URLs, never paths on disk",
    ),
    (
        "core/server/src/http/access.rs",
        "the permission of each route, matched on the route table's URL templates (Iggy's \
         /streams/..., /users/...): URLs, never paths on disk",
    ),
    (
        "core/server/src/config.rs",
        "DEFAULT_DATA_DIR: where the operator's data directory is by default (a configuration \
         value), not a name sluice creates inside it",
    ),
];

const SERVER_SRC: &str = "core/server/src/";
const LAYOUT: &str = "core/server/src/layout.rs";
const STORAGE_LIB: &str = "core/storage/src/lib.rs";

// ---- violations ---------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct Violation {
    path: String,
    line: usize,
    message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.message)
    }
}

fn violation(path: &str, line: usize, message: impl Into<String>) -> Violation {
    Violation {
        path: path.to_string(),
        line,
        message: message.into(),
    }
}

/// Fails listing every violation, one per line.
fn assert_none(rule: &str, violations: &[Violation]) {
    if violations.is_empty() {
        return;
    }
    let list: Vec<String> = violations.iter().map(|v| format!("  {v}")).collect();
    panic!(
        "tidy: {rule}: {} violation(s):\n{}",
        violations.len(),
        list.join("\n")
    );
}

// ---- a small Rust lexer -------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// A string literal's text between its quotes (escapes left as written).
    Str(String),
    Punct(char),
    /// Numbers, char literals, lifetimes: never what a rule looks for.
    Other,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Tokens of a Rust source, comments dropped. Unterminated constructs end
/// the input rather than panic.
fn lex(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            let start_line = line;
            let (text, next) = quoted(&chars, i + 1, &mut line);
            out.push(Token {
                tok: Tok::Str(text),
                line: start_line,
            });
            i = next;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime / label.
            if at(i + 1) == '\\' {
                // Past the backslash and the escaped char (which may be `'`).
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
            }
            out.push(Token {
                tok: Tok::Other,
                line,
            });
        } else if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix && (at(i) == '"' || (at(i) == '#' && matches!(at(i + 1), '"' | '#'))) {
                let start_line = line;
                let (text, next) = raw_string(&chars, i, &mut line);
                out.push(Token {
                    tok: Tok::Str(text),
                    line: start_line,
                });
                i = next;
            } else if word == "r" && at(i) == '#' && is_ident_start(at(i + 1)) {
                // A raw identifier: `r#type`.
                let start = i + 1;
                i += 1;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
                out.push(Token {
                    tok: Tok::Ident(chars[start..i].iter().collect()),
                    line,
                });
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                let start_line = line;
                let (text, next) = quoted(&chars, i + 1, &mut line);
                out.push(Token {
                    tok: Tok::Str(text),
                    line: start_line,
                });
                i = next;
            } else if word == "b" && at(i) == '\'' {
                let mut j = i + 1;
                if at(j) == '\\' {
                    j += 1;
                }
                j += 1;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push(Token {
                    tok: Tok::Other,
                    line,
                });
            } else {
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
        } else if c.is_ascii_digit() {
            while i < chars.len()
                && (is_ident_char(chars[i]) || (chars[i] == '.' && at(i + 1).is_ascii_digit()))
            {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Other,
                line,
            });
        } else {
            out.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    out
}

/// The text of a `"`-string whose body starts at `i`, and where it ends.
fn quoted(chars: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    let mut text = String::new();
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' {
            text.push('\\');
            i += 1;
        }
        if let Some(&c) = chars.get(i) {
            if c == '\n' {
                *line += 1;
            }
            text.push(c);
        }
        i += 1;
    }
    (text, i + 1)
}

/// The text of a raw string whose `#`s or opening quote start at `i`.
fn raw_string(chars: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    let mut hashes = 0;
    while chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    i += 1; // the opening quote
    let mut text = String::new();
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return (text, i + 1 + hashes);
        }
        if chars[i] == '\n' {
            *line += 1;
        }
        text.push(chars[i]);
        i += 1;
    }
    (text, i)
}

fn is_punct(t: Option<&Token>, c: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(p), .. }) if *p == c)
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token {
            tok: Tok::Ident(s), ..
        }) => Some(s),
        _ => None,
    }
}

fn is_path_sep(tokens: &[Token], i: usize) -> bool {
    is_punct(tokens.get(i), ':') && is_punct(tokens.get(i + 1), ':')
}

/// The index just past the bracket that closes the one at `open`.
fn matching(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// Lines where a path `root::name` is used, `name` one of `names`: directly
/// (`root::name`, `root::name::x`) or as a first segment in a `use` group
/// (`root::{a, name::x}`). `root` may be `super`, matching any chain of
/// `super::` segments.
fn path_uses(tokens: &[Token], skip: &[bool], root: &str, names: &[&str]) -> Vec<usize> {
    let mut lines = Vec::new();
    for i in 0..tokens.len() {
        if skip.get(i).copied().unwrap_or(false) || ident(tokens.get(i)) != Some(root) {
            continue;
        }
        let mut j = i + 1;
        // `super::super::x`: look past the whole chain.
        while root == "super" && is_path_sep(tokens, j) && ident(tokens.get(j + 2)) == Some(root) {
            j += 3;
        }
        if !is_path_sep(tokens, j) {
            continue;
        }
        j += 2;
        if let Some(name) = ident(tokens.get(j)) {
            if names.contains(&name) {
                lines.push(tokens[j].line);
            }
        } else if is_punct(tokens.get(j), '{') {
            let end = matching(tokens, j);
            let mut depth = 0usize;
            let mut segment_start = true;
            for t in tokens.get(j..end).unwrap_or(&[]) {
                match &t.tok {
                    Tok::Punct('{') => {
                        depth += 1;
                        segment_start = depth == 1;
                    }
                    Tok::Punct('}') => depth = depth.saturating_sub(1),
                    Tok::Punct(',') if depth == 1 => segment_start = true,
                    Tok::Ident(name) if segment_start && depth == 1 => {
                        if names.contains(&name.as_str()) {
                            lines.push(t.line);
                        }
                        segment_start = false;
                    }
                    _ => segment_start = false,
                }
            }
        }
    }
    lines
}

/// Which tokens belong to an item under `#[cfg(test)]` (or to a file that
/// declares `#![cfg(test)]`).
fn test_only(tokens: &[Token]) -> Vec<bool> {
    let mut mask = vec![false; tokens.len()];
    let is_cfg_test = |at: usize| -> bool {
        is_punct(tokens.get(at), '[')
            && ident(tokens.get(at + 1)) == Some("cfg")
            && is_punct(tokens.get(at + 2), '(')
            && ident(tokens.get(at + 3)) == Some("test")
            && is_punct(tokens.get(at + 4), ')')
            && is_punct(tokens.get(at + 5), ']')
    };
    let mut i = 0;
    while i < tokens.len() {
        if !is_punct(tokens.get(i), '#') {
            i += 1;
            continue;
        }
        if is_punct(tokens.get(i + 1), '!') && is_cfg_test(i + 2) {
            mask.iter_mut().for_each(|m| *m = true);
            return mask;
        }
        if !is_cfg_test(i + 1) {
            i += 1;
            continue;
        }
        // The attribute, any further attributes, then the item: up to its
        // `;` or through its body's closing brace.
        let start = i;
        let mut j = i + 7;
        while is_punct(tokens.get(j), '#') && is_punct(tokens.get(j + 1), '[') {
            j = matching(tokens, j + 1);
        }
        let mut depth = 0usize;
        while j < tokens.len() {
            match tokens[j].tok {
                Tok::Punct('(' | '[') => depth += 1,
                Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
                Tok::Punct(';') if depth == 0 => {
                    j += 1;
                    break;
                }
                Tok::Punct('{') if depth == 0 => {
                    j = matching(tokens, j);
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let end = j.min(tokens.len());
        mask[start..end].iter_mut().for_each(|m| *m = true);
        i = end;
    }
    mask
}

// ---- reading the repository ---------------------------------------------

fn repo_root() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

/// Every `.rs` file of the repository, as (path relative to the root with
/// `/` separators, text), in a stable order. Build output (`target`) and
/// hidden directories are skipped.
fn rust_files() -> Vec<(String, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("tidy: cannot list {}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.unwrap_or_else(|e| panic!("tidy: {}: {e}", dir.display()));
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            let kind = entry
                .file_type()
                .unwrap_or_else(|e| panic!("tidy: {}: {e}", path.display()));
            if kind.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("tidy: cannot read {}: {e}", path.display()));
                let rel = path
                    .strip_prefix(&root)
                    .unwrap_or(&path)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().to_string())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((rel, text));
            }
        }
    }
    out.sort();
    assert!(
        out.iter().any(|(p, _)| p == LAYOUT),
        "tidy: {LAYOUT} not found under {}",
        root.display()
    );
    out
}

fn file<'a>(files: &'a [(String, String)], path: &str) -> &'a str {
    files
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, t)| t.as_str())
        .unwrap_or_else(|| panic!("tidy: {path} not found"))
}

// ---- rule 1: transports import only the Iggy layer -----------------------

/// The modules a file of `core/server/src` must not reach, by its directory.
fn forbidden_modules(path: &str) -> &'static [&'static str] {
    let Some(rest) = path.strip_prefix(SERVER_SRC) else {
        return &[];
    };
    if rest.starts_with("tcp/") {
        &["http"]
    } else if rest.starts_with("http/") {
        &["tcp"]
    } else if rest.starts_with("iggy/") {
        &["http", "tcp"]
    } else {
        &[]
    }
}

fn check_transport_imports(path: &str, text: &str) -> Vec<Violation> {
    let forbidden = forbidden_modules(path);
    if forbidden.is_empty() {
        return Vec::new();
    }
    let tokens = lex(text);
    let none = vec![false; tokens.len()];
    // (line, 0 for code and 1 for any mention, what): one report per line,
    // the code use rather than the mention.
    let mut lines: Vec<(usize, u8, String)> = Vec::new();
    for module in forbidden {
        for root in ["crate", "super"] {
            for line in path_uses(&tokens, &none, root, &[module]) {
                lines.push((line, 0, format!("uses `{root}::{module}`")));
            }
        }
        // Comments and docs too: a mention is a dependency in waiting.
        let needle = format!("crate::{module}");
        for (n, l) in text.lines().enumerate() {
            if l.contains(&needle) {
                lines.push((n + 1, 1, format!("mentions `{needle}`")));
            }
        }
    }
    lines.sort();
    lines.dedup_by_key(|(line, _, _)| *line);
    let layer = if path.contains("/iggy/") {
        "the Iggy layer must not depend on a transport"
    } else {
        "a transport imports only from the Iggy layer (crate::iggy), never from the other transport"
    };
    lines
        .into_iter()
        .map(|(line, _, what)| violation(path, line, format!("{what}: {layer}")))
        .collect()
}

// ---- rule 2: std::fs only where allowed ---------------------------------

fn std_fs_allowance(path: &str) -> Option<&'static str> {
    STD_FS_ALLOWED
        .iter()
        .find(|(prefix, _)| path.starts_with(prefix))
        .map(|(prefix, _)| *prefix)
}

/// Lines of `text` that use `std::fs` in code.
fn std_fs_uses(text: &str) -> Vec<usize> {
    let tokens = lex(text);
    let none = vec![false; tokens.len()];
    let mut lines = path_uses(&tokens, &none, "std", &["fs"]);
    lines.dedup();
    lines
}

fn check_std_fs(path: &str, text: &str) -> Vec<Violation> {
    if std_fs_allowance(path).is_some() {
        return Vec::new();
    }
    std_fs_uses(text)
        .into_iter()
        .map(|line| {
            violation(
                path,
                line,
                "uses `std::fs`: only core/storage touches the disk (ADR 0001); \
                 go through DurableStorage, or add the path to STD_FS_ALLOWED with its reason",
            )
        })
        .collect()
}

// ---- rule 3: on-disk names only in layout.rs -----------------------------

/// The names layout.rs declares.
#[derive(Debug, Default)]
struct DiskNames {
    /// Whole names (`segments`, `purge.obligation`, `log`).
    exact: Vec<String>,
    /// Suffixes a file name ends with (`.purged`, `.log`).
    suffixes: Vec<String>,
}

impl DiskNames {
    /// Every `const NAME: &str = "value";` of layout.rs; an extension
    /// (`*_EXT`) also as the suffix `.value`.
    fn from_layout(text: &str) -> DiskNames {
        let mut names = DiskNames::default();
        for (name, value, _) in str_consts(&lex(text)) {
            if value.is_empty() {
                continue;
            }
            if value.starts_with('.') {
                names.suffixes.push(value.clone());
            } else if name.ends_with("_EXT") {
                names.suffixes.push(format!(".{value}"));
            }
            names.exact.push(value);
        }
        names
    }

    /// Why `literal` spells an on-disk name, if it does.
    fn spelled_in(&self, literal: &str, path_components: bool) -> Option<String> {
        if self.exact.iter().any(|n| n == literal) {
            return Some(format!("the string {literal:?} is an on-disk name"));
        }
        let separators = |c: char| c.is_whitespace() || "/\\{}()[]:,;=\"'`<>|".contains(c);
        for word in literal.split(separators).filter(|w| !w.is_empty()) {
            if let Some(s) = self.suffixes.iter().find(|s| word.ends_with(s.as_str())) {
                return Some(format!("{literal:?} spells the on-disk suffix {s:?}"));
            }
            let dotted = |n: &&String| n.contains('.') && word == n.as_str();
            if let Some(n) = self.exact.iter().find(dotted) {
                return Some(format!("{literal:?} spells the on-disk name {n:?}"));
            }
        }
        if !path_components {
            return None;
        }
        // A path: a word with a `/` before something (`/a`, `a/b`; prose
        // such as "consumers/ is synced" is not one).
        let paths = literal
            .split_whitespace()
            .filter(|w| w.trim_end_matches('/').contains('/'));
        for path in paths {
            let component = path
                .split('/')
                .find(|part| self.exact.iter().any(|n| n == part));
            if let Some(c) = component {
                return Some(format!("{literal:?} spells the on-disk directory {c:?}"));
            }
        }
        None
    }
}

/// `(NAME, value, line)` of every `const NAME: &str = "value";`.
fn str_consts(tokens: &[Token]) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.tok != Tok::Ident("const".into()) {
            continue;
        }
        let (Some(name), true, true, Some("str"), true) = (
            ident(tokens.get(i + 1)),
            is_punct(tokens.get(i + 2), ':'),
            is_punct(tokens.get(i + 3), '&'),
            ident(tokens.get(i + 4)),
            is_punct(tokens.get(i + 5), '='),
        ) else {
            continue;
        };
        if let Some(Token {
            tok: Tok::Str(value),
            line,
        }) = tokens.get(i + 6)
        {
            out.push((name.to_string(), value.clone(), *line));
        }
    }
    out
}

/// `&str` constants named like an on-disk name.
fn name_like_consts(tokens: &[Token]) -> Vec<(String, String, usize)> {
    let name_like = ["_FILE", "_DIR", "_SUFFIX", "_EXT", "_MARKER"];
    str_consts(tokens)
        .into_iter()
        .filter(|(name, _, _)| name_like.iter().any(|s| name.ends_with(s)))
        .collect()
}

fn names_allowance(path: &str) -> Option<&'static str> {
    NAMES_ALLOWED
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(p, _)| *p)
}

fn check_disk_names(path: &str, text: &str, names: &DiskNames) -> Vec<Violation> {
    if !path.starts_with(SERVER_SRC) || path == LAYOUT {
        return Vec::new();
    }
    let allowed = names_allowance(path).is_some();
    let tokens = lex(text);
    let mut out = Vec::new();
    for t in &tokens {
        if let Tok::Str(literal) = &t.tok
            && let Some(why) = names.spelled_in(literal, !allowed)
        {
            out.push(violation(
                path,
                t.line,
                format!("{why}: spell it through core/server/src/layout.rs"),
            ));
        }
    }
    if !allowed {
        for (name, value, line) in name_like_consts(&tokens) {
            out.push(violation(
                path,
                line,
                format!("declares the name {name} = {value:?}: on-disk names live in layout.rs"),
            ));
        }
    }
    out.sort_by_key(|v| v.line);
    out
}

// ---- rule 4: the engine takes nothing from the simulator ----------------

/// The items `sluice_storage` re-exports from `sim` (`pub use sim::{...}`).
fn sim_reexports(storage_lib: &str) -> Vec<String> {
    let tokens = lex(storage_lib);
    let mut out = Vec::new();
    for i in 0..tokens.len() {
        let is_use = ident(tokens.get(i)) == Some("use")
            && ident(tokens.get(i + 1)) == Some("sim")
            && is_path_sep(&tokens, i + 2);
        if !is_use {
            continue;
        }
        if let Some(name) = ident(tokens.get(i + 4)) {
            out.push(name.to_string());
        } else if is_punct(tokens.get(i + 4), '{') {
            let end = matching(&tokens, i + 4);
            let mut expect_name = true;
            for t in tokens.get(i + 5..end).unwrap_or(&[]) {
                match &t.tok {
                    Tok::Ident(name) if expect_name => {
                        out.push(name.clone());
                        expect_name = false;
                    }
                    Tok::Punct(',') => expect_name = true,
                    _ => {}
                }
            }
        }
    }
    out
}

fn check_sim_use(path: &str, text: &str, sim_items: &[String]) -> Vec<Violation> {
    if !path.starts_with(SERVER_SRC) {
        return Vec::new();
    }
    let tokens = lex(text);
    let skip = test_only(&tokens);
    let mut names: Vec<&str> = vec!["sim"];
    names.extend(sim_items.iter().map(String::as_str));
    let mut lines = path_uses(&tokens, &skip, "sluice_storage", &names);
    lines.sort();
    lines.dedup();
    lines
        .into_iter()
        .map(|line| {
            violation(
                path,
                line,
                "takes from sluice_storage::sim outside #[cfg(test)]: the production engine \
                 must not depend on the simulator",
            )
        })
        .collect()
}

// ---- the rules on the repository ----------------------------------------

#[test]
fn tidy_transports_import_only_the_iggy_layer() {
    let files = rust_files();
    let mut all = Vec::new();
    let mut checked = 0;
    for (path, text) in &files {
        if !forbidden_modules(path).is_empty() {
            checked += 1;
            all.extend(check_transport_imports(path, text));
        }
    }
    assert!(checked >= 3, "tidy: found only {checked} transport files");
    assert_none("transports import only the Iggy layer", &all);
}

#[test]
fn tidy_only_the_storage_crate_and_allowed_tools_use_std_fs() {
    let files = rust_files();
    let mut all = Vec::new();
    for (path, text) in &files {
        all.extend(check_std_fs(path, text));
    }
    for (prefix, _) in STD_FS_ALLOWED {
        let used = files
            .iter()
            .any(|(p, t)| p.starts_with(prefix) && !std_fs_uses(t).is_empty());
        if !used {
            all.push(violation(
                prefix,
                0,
                "stale STD_FS_ALLOWED entry: nothing there uses std::fs any more; remove it",
            ));
        }
    }
    assert_none("std::fs only in core/storage and the allowed paths", &all);
}

#[test]
fn tidy_on_disk_names_are_spelled_only_in_layout() {
    let files = rust_files();
    let names = DiskNames::from_layout(file(&files, LAYOUT));
    assert!(
        names.exact.len() >= 10 && names.suffixes.len() >= 3,
        "tidy: layout.rs declares suspiciously few names: {names:?}"
    );
    let mut all = Vec::new();
    for (path, text) in &files {
        all.extend(check_disk_names(path, text, &names));
    }
    for (path, _) in NAMES_ALLOWED {
        // An allowed file must still exist and still need its entry.
        let tokens = lex(file(&files, path));
        let needed = !name_like_consts(&tokens).is_empty()
            || tokens.iter().any(|t| match &t.tok {
                Tok::Str(literal) => names.spelled_in(literal, true).is_some(),
                _ => false,
            });
        if !needed {
            all.push(violation(
                path,
                0,
                "stale NAMES_ALLOWED entry: the file no longer needs it; remove it",
            ));
        }
    }
    assert_none("on-disk names only in layout.rs", &all);
}

#[test]
fn tidy_the_production_engine_takes_nothing_from_the_simulator() {
    let files = rust_files();
    let sim_items = sim_reexports(file(&files, STORAGE_LIB));
    assert!(
        sim_items.iter().any(|n| n == "SimStorage"),
        "tidy: {STORAGE_LIB} no longer re-exports SimStorage from sim: {sim_items:?}"
    );
    let mut all = Vec::new();
    for (path, text) in &files {
        all.extend(check_sim_use(path, text, &sim_items));
    }
    assert_none("no sluice_storage::sim in production server code", &all);
}

// ---- teeth: each checker reports a violation shown to it ----------------

const LAYOUT_EXAMPLE: &str = r#"
pub const STREAMS_DIR: &str = "streams";
pub(crate) const SEGMENTS_DIR: &str = "segments";
pub const PURGED_SUFFIX: &str = ".purged";
pub const OBLIGATION_FILE: &str = "purge.obligation";
pub(crate) const LOG_EXT: &str = "log";
pub(crate) const INDEX_EXT: &str = "idx";
"#;

fn lines_of(v: &[Violation]) -> Vec<usize> {
    v.iter().map(|v| v.line).collect()
}

#[test]
fn teeth_the_lexer_skips_comments_strings_and_char_literals() {
    let src =
        "let q = '\"'; // std::fs\n/* \"x\" */ let s = r#\"a \"b\"\"#; let l: &'a str = b\"c\";";
    let strs: Vec<String> = lex(src)
        .into_iter()
        .filter_map(|t| match t.tok {
            Tok::Str(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(strs, vec!["a \"b\"".to_string(), "c".to_string()]);
    assert!(std_fs_uses(src).is_empty());
}

#[test]
fn teeth_rule_1_reports_a_transport_reaching_the_other() {
    let tcp =
        "use super::codec;\nuse crate::http::AppState;\nfn f() { crate::http::system::stats(); }\n";
    let v = check_transport_imports("core/server/src/tcp/handler.rs", tcp);
    assert_eq!(lines_of(&v), vec![2, 3], "{v:?}");

    let grouped = "use crate::{engine::Engine, tcp::clients::ClientEntry};\n";
    let v = check_transport_imports("core/server/src/http/system.rs", grouped);
    assert_eq!(lines_of(&v), vec![1], "{v:?}");

    let relative = "use super::super::http::error::ApiError;\n";
    let v = check_transport_imports("core/server/src/tcp/x.rs", relative);
    assert_eq!(lines_of(&v), vec![1], "{v:?}");

    let doc = "//! Answers like `crate::http::streams` does.\n";
    let v = check_transport_imports("core/server/src/tcp/x.rs", doc);
    assert_eq!(lines_of(&v), vec![1], "{v:?}");

    let layer = "use crate::tcp::next_session;\n";
    let v = check_transport_imports("core/server/src/iggy/state.rs", layer);
    assert_eq!(lines_of(&v), vec![1], "{v:?}");

    // Through the Iggy layer, and outside the transports, it is fine.
    let fine = "use crate::iggy::AppState;\nuse crate::http::router;\n";
    assert!(
        check_transport_imports("core/server/src/tcp/x.rs", "use crate::iggy::AppState;")
            .is_empty()
    );
    assert!(check_transport_imports("core/server/src/server.rs", fine).is_empty());
}

#[test]
fn teeth_rule_2_reports_std_fs_outside_the_allowed_paths() {
    let src = "use std::fs;\nfn f() { let _ = std::fs::read(\"x\"); }\nuse std::{io, fs::File};\n// std::fs in a comment\nconst S: &str = \"std::fs\";\n";
    let v = check_std_fs("core/server/src/engine/mod.rs", src);
    assert_eq!(lines_of(&v), vec![1, 2, 3], "{v:?}");
    let v = check_std_fs("core/simulator/src/run.rs", "use ::std::fs::File;");
    assert_eq!(lines_of(&v), vec![1], "{v:?}");
    assert!(check_std_fs("core/storage/src/disk.rs", src).is_empty());
    assert!(check_std_fs("core/cli/src/bench/mod.rs", src).is_empty());
}

#[test]
fn teeth_rule_3_reports_on_disk_names_outside_layout() {
    let names = DiskNames::from_layout(LAYOUT_EXAMPLE);
    assert!(names.suffixes.contains(&".log".to_string()), "{names:?}");
    let src = r#"
fn a() -> bool { matches!(ext, "log" | "idx") }
fn b(n: &str) -> String { format!("{n}.purged") }
fn c(p: &Path) -> PathBuf { p.join("purge.obligation") }
fn d(p: &Path) -> PathBuf { p.join("streams/1/topics") }
const REDIRTY_SUFFIX: &str = ".redirty";
// "segments" in a comment, and prose in a string:
fn e() -> &'static str { "the segments of a log are listed; segments/ is synced" }
"#;
    let v = check_disk_names("core/server/src/partition/purge/mod.rs", src, &names);
    assert_eq!(lines_of(&v), vec![2, 2, 3, 4, 5, 6], "{v:?}");
    // The layout itself, and the route table's URLs, may spell them.
    assert!(check_disk_names(LAYOUT, src, &names).is_empty());
    let routes = r#"const TOPIC: &str = "/streams/{stream_id}/topics/{topic_id}";"#;
    assert!(check_disk_names("core/server/src/http/mod.rs", routes, &names).is_empty());
    assert_eq!(
        check_disk_names("core/server/src/http/status.rs", routes, &names).len(),
        1
    );
}

#[test]
fn teeth_rule_4_reports_the_simulator_in_production_code() {
    let storage_lib =
        "pub mod sim;\npub use sim::{\n    Crash, SimStorage,\n};\npub use rng::SimRng;\n";
    let items = sim_reexports(storage_lib);
    assert_eq!(items, vec!["Crash".to_string(), "SimStorage".to_string()]);
    let src = r#"
use sluice_storage::sim::SimRng;
use sluice_storage::{DurableStorage, SimStorage};
use sluice_storage::SimRng as Rng;

#[cfg(test)]
mod tests {
    use sluice_storage::sim::Fault;
    use sluice_storage::SimStorage;
}

#[cfg(test)]
fn helper() -> sluice_storage::SimStorage { todo!() }

fn after() { let _ = sluice_storage::Crash::PowerLoss; }
"#;
    let v = check_sim_use("core/server/src/engine/mod.rs", src, &items);
    assert_eq!(lines_of(&v), vec![2, 3, 15], "{v:?}");
    assert!(check_sim_use("core/simulator/src/run.rs", src, &items).is_empty());
    assert!(
        check_sim_use(
            "core/server/src/x.rs",
            "#![cfg(test)]\nuse sluice_storage::sim::Fault;",
            &items
        )
        .is_empty()
    );
}
