"""How well `pope-audit lint` catches wrong yes/no readouts: precision and recall over the pattern fixtures, each decision
in them judged by hand in `tests/fixtures/lint/patterns/EXPECTED.tsv` (wrong: must fail; ok: must pass; cannot: lint must
say it cannot judge).

    python benchmarks/lint_patterns.py [--corpus DIR]

Recall is the share of the decisions judged wrong that lint fails; precision the share of lint's failing findings that
were judged wrong (a failing finding on a decision judged ok, or on one not listed, counts against it). Each file is
linted under the tokenizer and template its row names (the shared vocabularies: POPE_AUDIT_SHARED or ../shared).

`--corpus DIR` does the same over a folder of real evaluation scripts gathered outside the repository, judged by hand
in `DIR/VERDICTS.tsv` (file, tokenizer, template, verdict, note; verdict ID-WRONG, PARSE-WRONG, ID-SOUND, PARSE-SOUND or
NONE, several comma-joined when a file holds more than one readout), and prints the recall on the wrong ones and the
false-alarm rate on the rest.
"""
import argparse, collections, sys
from pathlib import Path
from pope_audit.interface.lint import lint
from pope_audit.foundation.tokens import shared_tokenizer

ROOT = Path(__file__).resolve().parents[1]
PAT = ROOT/'tests/fixtures/lint/patterns'
_toks = {}


def tok(name):
    if name not in _toks: _toks[name] = shared_tokenizer(name)
    return _toks[name]


def rows(path, n):
    "The tab-separated rows of a hand-judged table, comments skipped, `\\n` in a template read as a newline."
    out = []
    for line in Path(path).read_text().splitlines():
        if line.startswith('#') or not line.strip(): continue
        cells = line.split('\t')
        assert len(cells) == n, f'{path}: {line!r}'
        out.append([c.replace('\\n', '\n') for c in cells])
    return out


def patterns():
    "Precision and recall over the pattern fixtures, with one line per decision."
    table = rows(PAT/'EXPECTED.tsv', 6)
    groups = collections.defaultdict(list)
    for f, t, m, line, what, want in table: groups[(f, t, m)].append((int(line), what, want))
    caught = wrong_total = true_fail = fail = cannot_ok = cannot_total = 0
    for (f, t, m), want in groups.items():
        r = lint([PAT/f], tok(t), m)
        for line, what, exp in want:
            got = [x for x in r.findings if x.line == line and x.what.startswith(what)]
            v = got[0].verdict if got else 'not found'
            ok = (got and got[0].wrong) if exp == 'wrong' else (got and got[0].verdict == 'suspect') if exp == 'cannot' else (got and not got[0].wrong and got[0].verdict != 'suspect')
            print(f"{'ok  ' if ok else 'MISS'} {exp:6} {v:16} {f}:{line} {what}  [{t}, {m.splitlines()[0]}]")
            wrong_total += exp == 'wrong'; caught += exp == 'wrong' and bool(ok)
            cannot_total += exp == 'cannot'; cannot_ok += exp == 'cannot' and bool(ok)
        listed = {(line, what) for line, what, _ in want}
        for x in r.findings:
            if not x.wrong: continue
            fail += 1
            exp = next((e for line, what, e in want if x.line == line and x.what.startswith(what)), None)
            true_fail += exp == 'wrong'
            if exp is None: print(f'EXTRA failing finding not in the table: {x.where} {x.what} ({x.verdict})')
    print(f'\npatterns: recall {caught}/{wrong_total} = {caught / wrong_total:.3f}; precision {true_fail}/{fail} = {true_fail / max(fail, 1):.3f}; '
          f'cannot judge said {cannot_ok}/{cannot_total}')


def corpus(folder):
    "Recall on the readouts judged wrong, and the false-alarm rate on the rest, over a hand-judged corpus (a file may carry several verdicts, comma-joined)."
    folder = Path(folder)
    res = collections.Counter()
    for f, t, m, verdict, note in rows(folder/'VERDICTS.tsv', 5):
        r = lint([folder/f], tok(t), m)
        kinds, vs = {x.kind for x in r.findings if x.wrong}, set(verdict.split(','))
        failed = {'ID-WRONG': bool(kinds & {'id', 'lookup'}), 'PARSE-WRONG': 'parser' in kinds}
        for v in ('ID-WRONG', 'PARSE-WRONG'):
            if v in vs: res[v, failed[v]] += 1
        alarm = any(failed[v] for v in failed if v not in vs)            # a kind failed that the file was not judged wrong for
        res['alarm', alarm] += not (vs & set(failed))
        ok = all(failed[v] == (v in vs) for v in failed)
        print(f"{'agree   ' if ok else 'DISAGREE'} {verdict:22} {f}")
    for v in ('ID-WRONG', 'PARSE-WRONG'):
        n = res[v, True] + res[v, False]
        print(f'{v}: caught {res[v, True]}/{n}')
    n, fa = res['alarm', True] + res['alarm', False], res['alarm', True]
    print(f'files judged sound or without a readout: {fa}/{n} failed (false-alarm rate {fa / max(n, 1):.3f})')


if __name__ == '__main__':
    p = argparse.ArgumentParser()
    p.add_argument('--corpus', help='a folder of real scripts with VERDICTS.tsv (kept outside the repository)')
    a = p.parse_args()
    corpus(a.corpus) if a.corpus else patterns()
