"""PTX text → `Module`.

A hand-written scanner: PTX mixes line-oriented directives (`.loc`, `.file`,
`.version`) with `;`-terminated statements and `{ }` blocks, which no single
regular grammar captures. The scanner walks the text once; statements are then
split into guard, opcode and operands. Every failure is a `ParseError` pointing
at the line and column.
"""

from __future__ import annotations

import functools
import re

from neutrino.errors import Diagnostic, Location, ParseError
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.operands import (  # noqa: F401 - the operand grammar, re-exported for the parser's callers
    ADDRESS_RE, FLAT_OPERANDS_RE, FLAT_OPERAND_RE, IDENT, IMM_RE, LAZY_OPERAND_RE, OFFSET_OPERAND_RE,
    PERCENT_NAME, PLAIN_ELEMENT_RE, PLAIN_NAME, REG_RE, SPECIAL_ELEMENTS, SYMBOL_RE, VECTOR_ELEMENTS, _FLAT,
    _offset_operand, cached_operand, parse_address, parse_lazy_operands, parse_operand, parse_operand_list,
    split_top)

# Directives that end at the end of their line, not at a ';'.
LINE_DIRECTIVES = (".version", ".target", ".address_size", ".file", ".loc")
LABEL_RE = re.compile(rf"({IDENT})\s*:(?!:)")
OPCODE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_:]+)*$")
# ptxas allows space around the guard's '!': `@ %p`, `@! %p`, `@ ! %p` (printed back as `@%p`, `@!%p`).
GUARD_RE = re.compile(rf"@\s*(!?)\s*({IDENT})\s+")
SPACE_RE = re.compile(r"\s*")
BALANCE_RE = re.compile(r'[{}]|"[^"\n]*"|//[^\n]*|/\*(?:.|\n)*?(?:\*/|$)')
# A statement up to its ';' with at most one level of { } (vector operands), no comments or strings.
FAST_STATEMENT_RE = re.compile(r"([^;{}\"/]*(?:\{[^;{}\"/]*\}[^;{}\"/]*)*);")
CAREFUL_DIRECTIVES = frozenset(LINE_DIRECTIVES) | {".reg"}
WORD_RE = re.compile(r"\.?[A-Za-z_$][A-Za-z0-9_$]*")
DIRECTIVE_WORD_RE = re.compile(r"\.[A-Za-z_]+")
RANGED_NAME_RE = re.compile(rf"({IDENT})\s*<\s*(\d+)\s*>")
REG_NAME_RE = re.compile(IDENT)
# An opcode may be followed directly by a vector operand: `ld.global.v2.b32{%r1, %r2}, [%rd1];`.
INSTRUCTION_RE = re.compile(
    # the operands end at their last non-space character: a greedy `.*` backtracks over the trailing
    # space only (a lazy `.*?\s*$` retries the tail at every character: quadratic in long blank runs)
    rf"\s*(?:@\s*(!?)\s*({IDENT})\s+)?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_:]+)*)(?:(?:\s+|(?=\{{))(\S.*\S|\S))?\s*$", re.S
)
LINE_DIRECTIVE_RE = re.compile(r"\.(?:loc|file)\b")


def _trie_pattern(words: list[str]) -> str:
    """An alternation of `words` as a prefix tree: the regex engine then follows one branch per character."""
    if "" in words and len(words) == 1:
        return ""
    branches = []
    for first in sorted({w[0] for w in words if w}):
        rest = _trie_pattern([w[1:] for w in words if w and w[0] == first])
        branches.append(re.escape(first) + rest)
    optional = "" in words
    if len(branches) == 1 and not optional:
        return branches[0]
    return "(?:" + "|".join(branches) + ")" + ("?" if optional else "")


def _lazy_operands_re() -> re.Pattern:
    """Operand lists that `parse_lazy_operands` splits as `parse_operand_list` would: the shapes compilers emit.

    Instructions whose operands match keep their text and are parsed on first
    use (`ir.Instruction.operands`). Every shape here must parse; anything else
    (dotted special registers, floats, strings, call lists, odd addresses) is
    parsed at once so that errors still surface while parsing.
    """
    # Possessive quantifiers (`*+`, `++`) and the most common shapes first: the body regex
    # runs this on every instruction, and backtracking is most of its cost.
    name = r"[A-Za-z0-9_$]++"  # after '%'
    specials = _trie_pattern([s[1:] for s in ir.SPECIAL_REGISTERS])
    register = rf"%{name}"  # undotted: a register or a special register such as %clock64
    plain_register = rf"%(?!(?:{specials})(?![A-Za-z0-9_$])){name}"  # what an address may be based on
    integer = r"(?:0[xX][0-9a-fA-F]++|[1-9][0-9]*+|0)"
    immediate = r"[-+]?+(?:0[xX][0-9a-fA-F]++|0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|[0-9]++)[uU]?+"
    symbol = r"(?:[A-Za-z][A-Za-z0-9_$]*+|[_$][A-Za-z0-9_$]++)"  # also a register declared without '%'; the parser binds those
    address = rf"\[\s*+(?:{plain_register}|{symbol})\s*+(?:(?:\+\s*+-?+|-)\s*+{integer}\s*+)?+\]"
    item = rf"(?:{register}|{immediate}|_)"
    vector = rf"\{{\s*+{item}(?:\s*+,\s*+{item})*+\s*+\}}"
    operand = rf"(?:{register}(?:\|{register})?+|{address}|{immediate}|{vector}|!{register}|{symbol}|_)"
    return re.compile(rf"{operand}(?:\s*+,\s*+{operand})*+")


LAZY_OPERANDS_RE = _lazy_operands_re()

# One step of a function body, for the common shapes; anything else (strings,
# block comments, nested scopes, an opcode glued to its `{`, malformed text)
# takes the careful path. Names here are looser than the ISA's grammar where
# that is cheaper for the regex engine (measured with callgrind); the loop
# below sends the few names the grammar refuses to the careful path. An
# instruction whose operands fit the lazy grammar is split by this one match.
BODY_TOKEN_RE = re.compile(
    r"""\s*(?:
      (?P<comment>//[^\n]*)
    | (?P<close>\})
    | (?P<insn>(?:@(?P<negated>!?)(?P<guard>%[A-Za-z0-9_$]+|[A-Za-z][A-Za-z0-9_$]*|[_$][A-Za-z0-9_$]+)\s+)?
        (?P<opcode>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_:]+)*)(?:\s+(?P<operands>"""
    + LAZY_OPERANDS_RE.pattern
    + r"""))?)\s*;
    | (?P<label>[A-Za-z_$%][A-Za-z0-9_$]*)\s*:(?!:)
    | (?P<linedir>\.(?:loc|file)(?![A-Za-z0-9_$])[^\n/"]*)(?://[^\n]*)?(?=\n|$)
    | (?P<reg>\.reg(?![A-Za-z0-9_$])[^;{}"/]*);
    | (?P<directive>\.[A-Za-z_][^;{}"/]*);
    | (?P<stmt>[^;{}"/.\s][^;{}"/]*(?:\{[^;{}"/]*\}[^;{}"/]*)*);
    )""",  # whitespace before a statement, so that a match is the statement's spelling (`written`)
    re.X,
)
_TOKEN = BODY_TOKEN_RE.groupindex
COMMENT, CLOSE, INSN, LABEL, LINEDIR, REG, DIRECTIVE, STMT = (
    _TOKEN[k] for k in ("comment", "close", "insn", "label", "linedir", "reg", "directive", "stmt")
)
INSN_PARTS = tuple(_TOKEN[k] for k in ("negated", "guard", "opcode", "operands"))


class Scanner:
    """A cursor over the source text that knows lines and columns."""

    def __init__(self, text: str, source: str, first_line: int = 1, lazy: bool = False):
        self.text = text
        self.source = source
        self.lazy = lazy  # keep operand text of well-formed instructions for parsing on first use
        self.pos = 0
        self.first_line = first_line
        self._starts: list[int] | None = None  # built on first backward or error lookup
        self._last_pos = 0
        self._last_line = 0  # 0-based line of _last_pos
        self.opcodes: dict[str, ir.Opcode] = {}
        self.operand_lists: dict[str, tuple[ir.Operand, ...]] = {}
        self.guards: dict[tuple[str, str], ir.Guard] = {}
        self.plain_registers = False  # a `.reg` without '%' was read: the body's names need binding

    # -- positions
    @property
    def _line_starts(self) -> list[int]:
        if self._starts is None:
            self._starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        return self._starts

    def line_of(self, pos: int) -> int:
        if pos >= self._last_pos:  # the common case: moving forward through the text
            self._last_line += self.text.count("\n", self._last_pos, pos)
            self._last_pos = pos
            return self._last_line + self.first_line
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + self.first_line

    def location(self, pos: int) -> Location:
        idx = self.line_of(pos) - self.first_line
        start = self._line_starts[idx]
        end = self.text.find("\n", start)
        line_text = self.text[start : end if end >= 0 else len(self.text)]
        return Location(self.source, idx + self.first_line, pos - start + 1, line_text)

    def error(self, pos: int, message: str, hint: str = "") -> ParseError:
        return ParseError(Diagnostic(self.location(pos), message, hint=hint))

    # -- reading
    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def skip_space(self) -> None:
        self.pos = SPACE_RE.match(self.text, self.pos).end()

    def read_comment(self) -> str | None:
        if self.text.startswith("//", self.pos):
            end = self.text.find("\n", self.pos)
            end = len(self.text) if end < 0 else end
        elif self.text.startswith("/*", self.pos):
            end = self.text.find("*/", self.pos + 2)
            if end < 0:
                raise self.error(self.pos, "unterminated /* comment")
            end += 2
        else:
            return None
        comment = self.text[self.pos : end]
        self.pos = end
        return comment

    def read_line(self) -> str:
        """The rest of the line, without a trailing // comment."""
        end = self.text.find("\n", self.pos)
        end = len(self.text) if end < 0 else end
        line = self.text[self.pos : end]
        self.pos = end
        if '"' not in line:
            return line.split("//", 1)[0].rstrip()
        return strip_line_comment(line).rstrip()

    def read_until(self, stops: str, nest: bool = False) -> tuple[str, str]:
        """Text up to the first stop character outside comments and strings.

        With `nest`, stops inside `{ }` (vector operands) do not count.
        Comments in the text read become a single space.
        """
        pattern = _stop_pattern(stops, nest)
        text = self.text
        out = []
        depth = 0
        while True:
            m = pattern.search(text, self.pos)
            if m is None:
                out.append(text[self.pos :])
                self.pos = len(text)
                return "".join(out), ""
            out.append(text[self.pos : m.start()])
            self.pos = m.start()
            c = text[self.pos]
            if c in stops and depth == 0:
                return "".join(out), c
            if c == '"':
                end = text.find('"', self.pos + 1)
                if end < 0:
                    raise self.error(self.pos, "unterminated string")
                out.append(text[self.pos : end + 1])
                self.pos = end + 1
                continue
            if c == "/" and self.read_comment() is not None:
                out.append(" ")
                continue
            if nest and c == "{":
                depth += 1
            elif nest and c == "}":
                depth -= 1
            out.append(c)
            self.pos += 1

    def read_balanced(self) -> str:
        """From a '{' to its matching '}', comment- and string-aware; returns the inner text."""
        start = self.pos
        close = self.text.find("}", start + 1)
        inner = self.text[start + 1 : close]
        # The common case (DWARF sections): no nesting, strings or block comments, and the
        # '}' found is not inside a line comment.
        if close > 0 and "{" not in inner and '"' not in inner and "/*" not in inner and inner.rfind("//") <= inner.rfind("\n"):
            self.pos = close + 1
            return inner
        depth = 0
        for m in BALANCE_RE.finditer(self.text, self.pos):
            token = m.group(0)
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
                if depth == 0:
                    self.pos = m.end()
                    return self.text[start + 1 : self.pos - 1]
            elif token.startswith("/*") and not token.endswith("*/"):
                break
        raise self.error(start, "unbalanced '{'")


@functools.lru_cache(maxsize=64)
def _stop_pattern(stops: str, nest: bool) -> re.Pattern:
    """The characters `read_until` must look at: its stops, string and comment starts, braces when nesting."""
    return re.compile("[" + re.escape(stops + '"/' + ("{}" if nest else "")) + "]")


def strip_line_comment(line: str) -> str:
    in_string = False
    for i, c in enumerate(line):
        if c == '"':
            in_string = not in_string
        elif not in_string and line.startswith("//", i):
            return line[:i]
    return line


# ---------------------------------------------------------------- module level


# Explicit limits: nesting the parser (and the passes after it) would otherwise follow by
# recursion. Compilers stay far below them (nvcc and CUTLASS nest scopes < 10 deep).
MAX_SCOPE_DEPTH = 256
MAX_PAREN_DEPTH = 64
_NESTING = re.compile(r"//[^\n]*|/\*.*?\*/|[{}()]", re.S)


def check_nesting(scanner: "Scanner", text: str) -> None:
    """One linear scan: braces and parentheses nested beyond the limits are a located error."""
    braces = parens = 0
    for m in _NESTING.finditer(text):
        c = m.group()
        if c == "{":
            braces += 1
            if braces > MAX_SCOPE_DEPTH:
                raise scanner.error(m.start(), f"braces nested more than {MAX_SCOPE_DEPTH} deep",
                                    hint="Neutrino refuses deeper nesting of scopes and vector operands")
        elif c == "}":
            braces = max(braces - 1, 0)
        elif c == "(":
            parens += 1
            if parens > MAX_PAREN_DEPTH:
                raise scanner.error(m.start(), f"parentheses nested more than {MAX_PAREN_DEPTH} deep")
        elif c == ")":
            parens = max(parens - 1, 0)


# What may follow the last item: Ctrl-Z bytes (\x1a, the DOS end-of-file mark some old tools
# append) and whitespace. ptxas skips \x1a like a space anywhere; we take it only here.
END_OF_FILE_RE = re.compile(r"\x1a[\x1a\s]*")


def parse_module(text: str, source: str = "<ptx>", lazy: bool = True) -> ir.Module:
    """With `lazy`, operands of well-formed instructions are parsed on first use (same result)."""
    scanner = Scanner(text, source, lazy=lazy)
    check_nesting(scanner, text)
    module = ir.Module(source=source)
    while True:
        space = scanner.pos  # an item's spelling starts with the whitespace before it
        scanner.skip_space()
        if scanner.at_end() or END_OF_FILE_RE.fullmatch(text, scanner.pos):
            module.trailing = text[space:]  # with any Ctrl-Z (DOS end-of-file) bytes, which ptxas skips
            return module
        pos = scanner.pos
        item = _top_level_item(scanner)
        if type(item) is ir.Function:
            item.written_head = text[space:pos] + item.written_head
        else:
            item.written = text[space : scanner.pos]
        module.items.append(item)


def _top_level_item(scanner: Scanner) -> ir.TopLevel:
    pos = scanner.pos
    line = scanner.line_of(pos)
    comment = scanner.read_comment()
    if comment is not None:
        return ir.Comment(comment, line)
    word = WORD_RE.match(scanner.text, pos)
    if word and word.group(0) in LINE_DIRECTIVES:
        return ir.Directive(scanner.read_line(), line)
    if word and word.group(0) == ".section":
        return ir.Directive(parse_section(scanner), line)
    return parse_declaration(scanner)


def parse_section(scanner: Scanner) -> str:
    head, stop = scanner.read_until("{;")
    if stop != "{":
        raise scanner.error(scanner.pos, "expected '{' after .section name")
    inner = scanner.read_balanced()
    return f"{' '.join(head.split())}\n{{{inner}}}"


def parse_declaration(scanner: Scanner) -> ir.TopLevel:
    """A function (definition or prototype) or a module-level variable."""
    start = scanner.pos
    line = scanner.line_of(start)
    head, stop = scanner.read_until(";{(")
    words = head.split()
    if ".entry" in words or ".func" in words:
        scanner.pos = start
        return parse_function(scanner)
    if stop == "":
        raise scanner.error(start, "unexpected end of input in declaration")
    if not head.strip().startswith("."):
        raise scanner.error(start, f"expected a directive or declaration, found {head.split()[0] if words else stop!r}")
    # A variable: everything to the ';' (initializers may contain braces and parentheses).
    scanner.pos = start
    text, stop = scanner.read_until(";")
    if stop != ";":
        raise scanner.error(start, "declaration is missing its ';'")
    scanner.pos += 1
    return ir.Directive(" ".join(text.split()) + ";", line)


def parse_function(scanner: Scanner) -> ir.Function:
    start = scanner.pos
    line = scanner.line_of(start)
    head, stop = scanner.read_until("(;{")
    words = head.split()
    kind_word = ".entry" if ".entry" in words else ".func"
    k = words.index(kind_word)
    linkage, rest = tuple(words[:k]), words[k + 1 :]
    returns = None
    if not rest and stop == "(" and kind_word == ".func":
        returns = parse_params(scanner)
        head, stop = scanner.read_until("(;{")
        rest = head.split()
    if len(rest) != 1 or not SYMBOL_RE.match(rest[0]):
        raise scanner.error(start, f"expected one function name after {kind_word}")
    name = rest[0]
    params = parse_params(scanner) if stop == "(" else None
    directives, stop = read_head_directives(scanner, kind_word == ".entry")
    function = ir.Function(
        kind=kind_word[1:], name=name, linkage=linkage, returns=returns, params=params, directives=directives, line=line
    )
    if stop == ";":
        scanner.pos += 1
        function.written_head = scanner.text[start : scanner.pos]
        function.written_key = function.head_key()
        return function
    if stop != "{":
        raise scanner.error(start, f"function {name} has no body")
    scanner.pos += 1
    function.written_head = scanner.text[start : scanner.pos]
    scanner.plain_registers = False
    function.body, function.closing = parse_body(scanner, start)
    function.written_key = function.head_key()
    if scanner.plain_registers:
        bind_plain_registers(function.body)
    return function


def parse_params(scanner: Scanner) -> list[ir.Param]:
    assert scanner.peek() == "("
    open_pos = scanner.pos
    scanner.pos += 1
    text, stop = scanner.read_until(")")
    if stop != ")":
        raise scanner.error(open_pos, "unbalanced '(' in parameter list")
    scanner.pos += 1
    return [ir.Param(" ".join(p.split())) for p in text.split(",") if p.strip()]


PRAGMA_RE = re.compile(r"\.pragma(?![A-Za-z0-9_$])")


def read_head_directives(scanner: Scanner, entry: bool) -> tuple[list[str], str]:
    """The directives between a function's parameters and its `{` or `;`, and that stop.

    An entry may carry `.pragma "...";` there (ptxas takes `.pragma "nounroll";`
    before a kernel's `{`, not before a `.func`'s): its ';' does not end the
    head, and it stays a directive of its own, ';' included.
    """
    directives: list[str] = []
    while True:
        text, stop = scanner.read_until(";{")
        pragma = PRAGMA_RE.search(text) if entry and stop == ";" else None
        if pragma is None:
            return directives + split_perf_directives(text), stop
        directives += split_perf_directives(text[: pragma.start()]) + [" ".join(text[pragma.start() :].split()) + ";"]
        scanner.pos += 1


def split_perf_directives(text: str) -> list[str]:
    directives: list[str] = []
    for word in text.split():
        if word.startswith(".") or not directives:
            directives.append(word)
        else:
            directives[-1] += (" " if not directives[-1].endswith(",") and not word.startswith(",") else "") + word
    return [re.sub(r"\s*,\s*", ", ", d) for d in directives]


# ---------------------------------------------------------------- bodies


def parse_body(scanner: Scanner, open_pos: int) -> tuple[list[ir.Statement], str]:
    """The statements up to the '}' that closes the body, and the whitespace before that '}'."""
    body: list[ir.Statement] = []
    text = scanner.text
    while True:
        closing = _read_common_statements(scanner, body)
        if closing is not None:
            return body, closing
        space = scanner.pos  # the statement's spelling starts with the whitespace before it
        scanner.skip_space()
        if scanner.at_end():
            raise scanner.error(open_pos, "'{' is never closed")
        pos = scanner.pos
        c = scanner.peek()
        if c == "}":
            scanner.pos += 1
            return body, text[space:pos]
        if c == "{":
            line = scanner.line_of(pos)
            scanner.pos += 1
            inner, closing = parse_body(scanner, pos)
            body.append(ir.Scope(inner, line, leading=text[space:pos], closing=closing))
            continue
        stmt = _careful_statement(scanner)
        stmt.written = text[space : scanner.pos]
        body.append(stmt)


def _careful_statement(scanner: Scanner) -> ir.Statement:
    """One statement of a shape the body regex does not take, from `scanner.pos`."""
    pos = scanner.pos
    line = scanner.line_of(pos)
    comment = scanner.read_comment()
    if comment is not None:
        return ir.Comment(comment, line)
    if scanner.peek() == ".":
        return parse_body_directive(scanner)
    label = LABEL_RE.match(scanner.text, pos)
    if label:
        scanner.pos = label.end()
        return ir.Label(label.group(1), line)
    fast = FAST_STATEMENT_RE.match(scanner.text, pos)
    if fast:
        text = fast.group(1)
        scanner.pos = fast.end()
    else:
        text, stop = scanner.read_until(";}", nest=True)
        if stop != ";":
            raise scanner.error(pos, "instruction is missing its ';'")
        scanner.pos += 1
    return parse_instruction(text, scanner, pos)


def _read_common_statements(scanner: Scanner, body: list[ir.Statement]) -> str | None:
    """Reads statements of the common shapes, one regex match each; after the body's '}', the whitespace before it.

    Stops at the first statement the body regex does not take (a gap before the
    next match, or a directive that needs care), leaving `scanner.pos` where the
    whitespace before it starts, for the careful path. Each match is the
    whitespace before a statement and the statement: its `written`. This loop
    is most of the parser's time, hence its inlining.
    """
    text = scanner.text
    append = body.append
    lazy = scanner.lazy
    opcodes, guards = scanner.opcodes, scanner.guards
    pos = line_pos = scanner.pos
    line = scanner.line_of(pos)
    # Anchored matches, each where the last ended (a scanner's match(), like \G): a search
    # (finditer) would retry at every later position when a statement does not fit, which
    # is quadratic on a long line without a ';'.
    for token in iter(BODY_TOKEN_RE.scanner(text, pos).match, None):
        kind = token.lastindex
        start = token.start(kind)
        written = token[0]
        end = pos + len(written)
        line += text.count("\n", line_pos, start)
        line_pos = start
        if kind == INSN:
            negated, guard_name, opcode_text, operand_text = token.group(*INSN_PARTS)
            if not lazy or (operand_text and opcode_text == "SAVE"):
                stmt = parse_instruction(token.group(kind), scanner, start)
                stmt.written = written
                append(stmt)
                pos = end
                continue
            guard = None
            if guard_name:
                guard = guards.get((negated, guard_name))
                if guard is None:
                    guard = guards[negated, guard_name] = ir.Guard(ir.Register(guard_name), negated=bool(negated))
            opcode = opcodes.get(opcode_text)
            if opcode is None:
                opcode = opcodes[opcode_text] = ir.opcode(opcode_text)
            if not operand_text:
                append(ir.Instruction(opcode, (), guard, line, None, None, written))
            else:
                if "\n" in operand_text:
                    operand_text = " ".join(operand_text.split())
                append(ir.Instruction(opcode, None, guard, line, None, operand_text, written))
            pos = end
            continue
        if kind == CLOSE:
            scanner.pos = end
            return text[pos:start]
        if kind == LINEDIR:
            directive = token.group(kind).rstrip()
            if directive.startswith(".loc") and loc_is_incomplete(directive):
                break  # its position continues on the next line: the careful path joins them
            stmt = ir.Directive(directive, line)
        elif kind == COMMENT:
            stmt = ir.Comment(token.group(kind), line)
        elif kind == LABEL:
            name = token.group(kind)
            if name in ("_", "$", "%"):
                break  # not an identifier: the careful path reports it
            stmt = ir.Label(name, line)
        elif kind == STMT:
            stmt = parse_instruction(token.group(kind), scanner, start)
        elif kind == REG:
            stmt = parse_reg_decl(token.group(kind), scanner, start)
        else:
            directive = token.group(kind)
            if DIRECTIVE_WORD_RE.match(directive).group(0) in CAREFUL_DIRECTIVES:
                break  # a malformed .reg, or a line directive that did not end at its line
            stmt = ir.Directive(" ".join(directive.split()) + ";", line)
        stmt.written = written
        append(stmt)
        pos = end
    scanner.pos = pos
    return None


# `.loc file line column` and its attributes (`, function_name L+4, inlined_at 1 2 3`).
LOC_POSITION_RE = re.compile(r"\.loc\s+\d+\s+\d+\s+\d+(?![A-Za-z0-9_$])")
LOC_CONTINUATION_RE = re.compile(r"\n[ \t]*(?=[0-9,]|function_name|inlined_at)")


def loc_is_incomplete(text: str) -> bool:
    """Does this `.loc` line lack part of its position, or end in a ','? (ptxas reads on over the newline.)"""
    return LOC_POSITION_RE.match(text) is None or text.endswith(",")


def read_loc(scanner: Scanner) -> str:
    """A `.loc`, joined into one line when ptxas would read its operands from the lines after it."""
    text = scanner.read_line()
    joined = False
    while loc_is_incomplete(text):
        more = LOC_CONTINUATION_RE.match(scanner.text, scanner.pos)
        if more is None:
            break
        scanner.pos = more.end()
        text += " " + scanner.read_line()
        joined = True
    return " ".join(text.replace(",", ", ").split()).replace(" ,", ",") if joined else text


def parse_body_directive(scanner: Scanner) -> ir.Statement:
    pos = scanner.pos
    line = scanner.line_of(pos)
    word_match = DIRECTIVE_WORD_RE.match(scanner.text, pos)
    word = word_match.group(0) if word_match else "."
    if word == ".loc":
        return ir.Directive(read_loc(scanner), line)
    if word in LINE_DIRECTIVES:
        return ir.Directive(scanner.read_line(), line)
    # Data directives may have initializers in braces (`.global .u32 t[2] = {1, 2};`).
    text, stop = scanner.read_until(";}", nest=True)
    if stop != ";":
        raise scanner.error(pos, f"directive {word} is missing its ';'")
    scanner.pos += 1
    if word == ".reg":
        return parse_reg_decl(text, scanner, pos)
    return ir.Directive(" ".join(text.split()) + ";", line)


# Spacing between the words is optional where a '.' or '%' separates them: `.reg.u64 %rd<2>;`, `.reg .v2.f32 %mx;`.
TYPE_WORD_RE = re.compile(r"[A-Za-z0-9_]+")
REG_DECL_RE = re.compile(r"\.reg\s*((?:\.v\d+\s*)?\.[A-Za-z0-9_]+)(?:\s+|(?=%))(.+)$", re.S)


def parse_reg_decl(text: str, scanner: Scanner, pos: int) -> ir.RegDecl:
    m = REG_DECL_RE.match(text.strip())
    if not m:
        raise scanner.error(pos, "malformed .reg declaration", hint="expected `.reg .TYPE %name;` or `.reg .TYPE %name<N>;`")
    type_text = m.group(1)
    # `.b32` → "b32"; `.v2 .f32`, `.v2.f32` → "v2 f32"
    rtype = type_text[1:] if type_text.count(".") == 1 else " ".join(TYPE_WORD_RE.findall(type_text))
    line = scanner.line_of(pos)
    names = m.group(2)
    ranged = RANGED_NAME_RE.fullmatch(names.strip()) if "," not in names else None
    if ranged:
        name = ranged.group(1)
        if name[0] != "%":
            scanner.plain_registers = True
        return ir.RegDecl(rtype, (name,), int(ranged.group(2)), line)
    names = [n.strip() for n in names.split(",")]
    for n in names:
        if not REG_NAME_RE.fullmatch(n):
            raise scanner.error(pos, f"malformed register name {n!r} in .reg declaration")
        if n[0] != "%":
            scanner.plain_registers = True
    return ir.RegDecl(rtype, tuple(names), None, line)


def bind_plain_registers(body: list[ir.Statement], visible: frozenset[str] = frozenset()) -> None:
    """Makes the names of registers declared without '%' registers in the operands of their scope.

    Out of context `p` in `selp.u32 tmp, 1, 0, p;` could be a label or a
    variable; a `.reg` in this scope or an enclosing one makes it a register.
    A declaration counts for its whole scope (compilers declare first). Only
    instructions that mention such a name are touched; they keep their text.
    """
    declared = {name for stmt in body if type(stmt) is ir.RegDecl for name in stmt.declared() if name[0] != "%"}
    names = visible | declared if declared else visible
    for stmt in body:
        kind = type(stmt)
        if kind is ir.Instruction and names:
            mentioned = names.intersection(stmt.symbol_names())
            if mentioned:
                # Set beside the text, not through the setter: the text still describes the operands.
                stmt._operands = tuple(ir.bind_registers(operand, mentioned) for operand in stmt.operands)
        elif kind is ir.Scope:
            bind_plain_registers(stmt.body, names)


# ---------------------------------------------------------------- instructions


def parse_instruction(text: str, scanner: Scanner, pos: int) -> ir.Instruction:
    line = scanner.line_of(pos)
    m = INSTRUCTION_RE.match(text)
    if m is None:
        return _instruction_error(text, scanner, pos)
    negated, guard_name, opcode_text, operand_text = m.groups()
    guard = None
    if guard_name:
        guard = scanner.guards.get((negated, guard_name))
        if guard is None:
            guard = scanner.guards[negated, guard_name] = ir.Guard(ir.Register(guard_name), negated=bool(negated))
    opcode = scanner.opcodes.get(opcode_text)
    if opcode is None:
        opcode = scanner.opcodes[opcode_text] = ir.opcode(opcode_text)
    if not operand_text:
        return ir.Instruction(opcode, (), guard, line)
    if scanner.lazy and LAZY_OPERANDS_RE.fullmatch(operand_text) and opcode_text != "SAVE":
        if "\n" in operand_text:
            operand_text = " ".join(operand_text.split())
        return ir.Instruction(opcode, None, guard, line, None, operand_text)
    operands = scanner.operand_lists.get(operand_text)
    if operands is None:
        operands = scanner.operand_lists[operand_text] = _parse_operand_list(opcode_text, operand_text, scanner, pos)
    return ir.Instruction(opcode, operands, guard, line)


def _parse_operand_list(opcode_text: str, text: str, scanner: Scanner, pos: int) -> tuple[ir.Operand, ...]:
    if opcode_text == "SAVE":  # probe snippets: `SAVE [ map ] {a, b}` has no comma after the map
        text = re.sub(r"^(\s*\[[^\]]*\])\s*(?=\{)", r"\1, ", text)
    try:
        return parse_operand_list(text)
    except ValueError as e:
        raise scanner.error(pos, str(e)) from None


def _instruction_error(text: str, scanner: Scanner, pos: int):
    body = text.strip()
    if not body:
        raise scanner.error(pos, "empty statement")
    if body.startswith("@") and not GUARD_RE.match(body):
        raise scanner.error(pos, "malformed guard predicate", hint="expected `@%p` or `@!%p` before the opcode")
    word = GUARD_RE.sub("", body, count=1).split(None, 1)[0] if GUARD_RE.sub("", body, count=1).split() else body
    raise scanner.error(pos, f"malformed opcode {word!r}")


# ---------------------------------------------------------------- snippets


def parse_statements(text: str, source: str = "<snippet>", first_line: int = 1) -> list[ir.Statement]:
    """A function body without its braces: how probe snippets are read."""
    scanner = Scanner(text + "\n}", source, first_line)
    check_nesting(scanner, text)  # the limits of parse_module hold in probe snippets too
    body, _ = parse_body(scanner, 0)
    if scanner.plain_registers:
        bind_plain_registers(body)
    for _, _, stmt in ir.walk(body):  # probe code prints in canonical form wherever it goes
        ir.drop_spelling(stmt)
        stmt.leading = None
        if type(stmt) is ir.Scope:
            stmt.closing = None
    return body
