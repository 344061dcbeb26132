"""SNCSE's soft negatives: the negation of each training sentence (Wang and Dou 2023, Sec. 3.1).

The official generation (Sense-GVT/SNCSE ``generate_soft_negative_samples.py:9-54``) parses each sentence with
spaCy's ``en_core_web_sm`` and applies, in order:

1. the sentence has a token ``not``: the first one is deleted (``:17-21``);
2. else the first token whose dependency label is ``aux`` / ``auxpass``, if one comes before the first ``ROOT``,
   gets `` not`` after it (``:23-36``);
3. else the ``ROOT`` token (the first one): one of :data:`SPECIAL_WORDS` gets `` not`` after it; tag ``VBP`` ->
   ``do not <lemma>``, ``VBZ`` -> ``does not <lemma>``, ``VBD`` -> ``did not <lemma>`` (``:37-46``);
4. otherwise (a ROOT of another tag, or no ROOT / aux at all) ``Not`` is put first (``:47-50``);

and the tokens are joined by single spaces (``:52``).  The file it writes has one JSON list
``[sentence, negation]`` a line, ``sentence`` being the corpus line ``.strip()``-ed (``:69-73``): the format
:func:`read_soft_negatives` reads (the official ``Files/soft_negative_samples.txt`` is that file).

``en_core_web_sm`` is not on PyPI (spaCy publishes its models on GitHub), so an offline machine cannot run the
official parser.  :class:`RuleParser` is the documented substitute: a regex tokenizer close to spaCy's English
one (punctuation, ``n't`` and ``'s`` split off, ``cannot`` -> ``can not``) and an auxiliary lexicon in place of
the dependency parse, feeding the SAME rules (:func:`negate_with_rule`): a ``not`` is deleted; the first auxiliary
or copula (:data:`AUXILIARIES`) gets `` not``; a sentence without one gets the official fallback ``Not`` first.
It never produces the do-support forms of rule 3 (they need a tagger and a lemmatizer).  With spaCy and
``en_core_web_sm`` installed, ``cselab data soft-negatives --parser spacy`` runs the official rules exactly.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: ROOT words that take a plain `` not`` (official ``generate_soft_negative_samples.py:5-6``)
SPECIAL_WORDS = ("am", "is", "was", "are", "were", "can", "could", "will",
                 "would", "shall", "should", "may", "must", "might")
#: the substitute's auxiliaries / copulas (lower-cased): :data:`SPECIAL_WORDS` and the forms of do / have / be
#: that spaCy labels ``aux`` / ``auxpass`` before a verb
AUXILIARIES = frozenset(SPECIAL_WORDS) | {"do", "does", "did", "has", "have", "had", "be", "been", "being"}
#: ``have`` forms are auxiliaries only before a participle-looking word (else the main verb: ``Not`` first)
_HAVE = {"has", "have", "had"}
#: official training punctuation set (``train_SNCSE.py:47``): a sentence ending in none of them gets `` .``
PUNCTUATION = tuple(string.punctuation)
_TOKEN = re.compile(r"(?i)\bcan(?=not\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\w+?(?=n't\b)|\w+(?:[-.]\w+)*|[^\w\s]")


@dataclass(frozen=True)
class ParsedSentence:
    """A sentence as the official rules read it: spaCy's tokens and their dependency labels, fine-grained
    tags and lemmas (four lists of the same length)."""

    tokens: tuple[str, ...]
    deps: tuple[str, ...]
    tags: tuple[str, ...]
    lemmas: tuple[str, ...]


def negate_with_rule(parsed: ParsedSentence) -> tuple[str, int]:
    """The official negation of a parsed sentence (``generate_soft_negative_samples.py:9-54``, rules 1-4 of the
    module docstring), tokens joined by single spaces, and the number of the rule that made it (1, 2 for rules 2
    and 3, or 4).

    Raises:
        ValueError: the four lists differ in length.
    """
    tokens, deps, tags, lemmas = (list(x) for x in (parsed.tokens, parsed.deps, parsed.tags, parsed.lemmas))
    if not len(tokens) == len(deps) == len(tags) == len(lemmas):
        raise ValueError(f"ParsedSentence: tokens/deps/tags/lemmas differ in length "
                         f"({len(tokens)}, {len(deps)}, {len(tags)}, {len(lemmas)})")
    if "not" in tokens:  # :17-21
        del tokens[tokens.index("not")]
        return " ".join(tokens), 1
    # :23-30: the first aux/auxpass or ROOT decides (the first aux, or the first ROOT, is then that token)
    index = next((i for i, dep in enumerate(deps) if dep in ("aux", "auxpass", "ROOT")), None)
    rule = 2
    if index is not None and deps[index] != "ROOT":  # :32-36
        tokens[index] += " not"
    elif index is not None:  # :37-48
        if tokens[index].lower() in SPECIAL_WORDS:
            tokens[index] += " not"
        elif tags[index] == "VBP":
            tokens[index] = "do not " + lemmas[index]
        elif tags[index] == "VBZ":
            tokens[index] = "does not " + lemmas[index]
        elif tags[index] == "VBD":
            tokens[index] = "did not " + lemmas[index]
        else:
            tokens.insert(0, "Not")
            rule = 4
    else:  # :49-50
        tokens.insert(0, "Not")
        rule = 4
    return " ".join(tokens), rule


class RuleParser:
    """The offline substitute for ``en_core_web_sm`` (module docstring): tokens from a spaCy-like regex, the
    first auxiliary (:data:`AUXILIARIES`; ``have`` forms only before a word ending in ``-ed`` / ``-en`` /
    ``been``) labelled ``aux``, every other token ``dep``; no ROOT, so a sentence without an auxiliary takes the
    official fallback (``Not`` first).  Tags are empty and lemmas the lower-cased tokens."""

    @staticmethod
    def tokenize(sentence: str) -> list[str]:
        """spaCy-like English tokens: words, ``n't`` / ``'s`` clitics and each punctuation mark apart."""
        return _TOKEN.findall(sentence)

    def __call__(self, sentence: str) -> ParsedSentence:
        tokens = self.tokenize(sentence)
        deps = ["dep"] * len(tokens)
        for i, tok in enumerate(tokens):
            low = tok.lower()
            if low not in AUXILIARIES:
                continue
            if low in _HAVE:
                nxt = tokens[i + 1].lower() if i + 1 < len(tokens) else ""
                if not (nxt.endswith(("ed", "en")) or nxt == "been"):
                    continue
            deps[i] = "aux"
            break
        return ParsedSentence(tuple(tokens), tuple(deps), ("",) * len(tokens), tuple(t.lower() for t in tokens))


class SpacyParser:
    """The official parser: spaCy's ``en_core_web_sm`` (``generate_soft_negative_samples.py:2,59``).

    Raises:
        ImportError: spaCy or ``en_core_web_sm`` is not installed (the message says how to get them, or to use
            ``--parser rules``).
    """

    def __init__(self, model: str = "en_core_web_sm") -> None:
        try:
            import spacy
        except ImportError as err:
            raise ImportError("--parser spacy needs spaCy (`pip install spacy`) and its English model "
                              "(`python -m spacy download en_core_web_sm`, from GitHub); offline, use "
                              "--parser rules") from err
        try:
            self.nlp = spacy.load(model)
        except OSError as err:
            raise ImportError(f"spaCy model {model!r} is not installed (`python -m spacy download {model}`); "
                              "offline, use --parser rules") from err

    def __call__(self, sentence: str) -> ParsedSentence:
        doc = self.nlp(sentence)
        return ParsedSentence(tuple(str(t) for t in doc), tuple(t.dep_ for t in doc), tuple(t.tag_ for t in doc),
                              tuple(t.lemma_ for t in doc))


def build_parser(name: str):
    """``rules`` -> :class:`RuleParser`, ``spacy`` -> :class:`SpacyParser`.

    Raises:
        ValueError: another name.  ImportError: (spacy) not installed.
    """
    if name == "rules":
        return RuleParser()
    if name == "spacy":
        return SpacyParser()
    raise ValueError(f"--parser {name!r}: expected rules or spacy")


def write_soft_negatives(corpus: str | Path, out: str | Path, parser) -> dict[str, int]:
    """Write the official soft-negative file (one ``json.dumps([sentence, negation])`` a line) for ``corpus``:
    ``sentence`` = each line ``.strip()``-ed (official ``:69-73``); empty lines are skipped (the official loop would
    write ``["", "Not"]``, which no training sentence can look up).

    Returns:
        counts: ``sentences``, ``not_deleted`` (rule 1), ``not_inserted`` (rules 2-3), ``not_prefixed`` (rule 4).

    Raises:
        FileNotFoundError: ``corpus`` is missing.
    """
    counts = {"sentences": 0, "not_deleted": 0, "not_inserted": 0, "not_prefixed": 0}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(corpus, encoding="utf-8", errors="replace") as f, open(tmp, "w", encoding="utf-8") as g:
        for sentence in filter(None, (line.strip() for line in f)):
            negation, rule = negate_with_rule(parser(sentence))
            counts["sentences"] += 1
            counts[{1: "not_deleted", 2: "not_inserted", 4: "not_prefixed"}[rule]] += 1
            g.write(json.dumps([sentence, negation]) + "\n")
    tmp.replace(out)
    return counts


def read_soft_negatives(path: str | Path) -> dict[str, str]:
    """The official soft-negative file as ``{sentence: negation}`` (``train_SNCSE.py:680-686``: later lines win).

    Raises:
        FileNotFoundError: no such file.  ValueError: a line that is not a JSON list of two strings (names the
            file and the line number).
    """
    negations: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not JSON ({err}); expected [sentence, negation]") from None
            if not (isinstance(row, list) and len(row) == 2 and all(isinstance(x, str) for x in row)):
                raise ValueError(f"{path}:{n}: expected a JSON list [sentence, negation], got {line.strip()[:80]!r}")
            negations[row[0]] = row[1]
    return negations


def official_period(sentence: str) -> str:
    """SNCSE's period rule (``train_SNCSE.py:468-469,515-516``; the evaluation scripts ``bert_prediction.py:68``):
    `` .`` appended when the stripped sentence does not end in a punctuation mark (``string.punctuation``).

    Raises:
        IndexError: a blank sentence, as the official ``sentence.strip()[-1]``.
    """
    return sentence + " ." if sentence.strip()[-1] not in PUNCTUATION else sentence


def soft_negative_pair(sentence: str, negations: Mapping[str, str]) -> tuple[str, str]:
    """The official training pair (``train_SNCSE.py:510-516``): the sentence with the period rule, and its soft
    negative looked up by THAT string, ``"Not " + sentence`` when absent, with the period rule too.  (So a line
    that got `` .`` is not found in a file keyed by the raw lines: its negative is ``"Not " + sentence + " ."``,
    as in the official run.)"""
    sentence = official_period(sentence)
    return sentence, official_period(negations.get(sentence, "Not " + sentence))


def soft_negative_rows(rows: Sequence[Mapping[str, str]], negations: Mapping[str, str]) -> list[dict[str, str]]:
    """``{"text": s, ...}`` rows -> ``{"text": s', "soft_neg": n'}`` (:func:`soft_negative_pair`)."""
    out = []
    for row in rows:
        text, neg = soft_negative_pair(row["text"], negations)
        out.append({**row, "text": text, "soft_neg": neg})
    return out
