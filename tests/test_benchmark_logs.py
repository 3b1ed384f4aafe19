"The peers' logs of AMBER and NaturalBench: VLMEvalKit's result tables and lmms-eval's amber_g log, checked against VLMEvalKit's own scoring run once (tests/reference/peers/benchmark_outputs.json), and their bad input."
import ast, csv, json, sys
from pathlib import Path
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import peer_inputs as P

REF = json.loads((Path(__file__).parent/'reference/peers/benchmark_outputs.json').read_text())


from conftest import run_cli as run


def score(capsys, *args):
    code, out, err = run(capsys, 'score', *args, '--json', '--boot', '0')
    assert code in (0, None), err
    return json.loads(out)


@pytest.fixture(scope='module')
def amber_table(shared): return P.amber_vlmeval_table(shared)


@pytest.fixture(scope='module')
def nb_table(shared): return P.naturalbench_vlmeval_table(shared)


def write(t, path):
    t.to_csv(path, sep='\t', index=False)
    return path


@pytest.mark.parametrize('with_questions', [True, False])
def test_vlmevalkit_amber_as_printed(shared, amber_table, tmp_path, capsys, with_questions):
    "AMBER_rating's four figures, to the last digit, joined to AMBER's questions by image and question or read on the table's own columns."
    f = write(amber_table, tmp_path/'AMBER_model.tsv')
    doc = score(capsys, f, *(['--questions', shared/'data/amber'] if with_questions else []))
    assert doc['kind'] == 'vlmevalkit' and doc['benchmark'] == 'amber'
    got = {r['metric']: r['value'] for r in doc['as_printed'] if r['tool'] == 'VLMEvalKit (AMBER)'}
    assert got == pytest.approx(REF['amber_rating'], abs=1e-9) and list(got) == list(REF['amber_rating'])
    sec = {(s['readout'], s['section']): s for s in doc['amber']['sections']}
    whole = sec['vlmeval_yorn', 'Descriminative Task']
    assert whole['questions'] == 14216
    assert REF['amber_rating']['Avg ACC'] != pytest.approx(whole['accuracy'], abs=1e-3)     # a mean of dimensions, not the pooled accuracy
    assert sec['amber', 'Descriminative Task']['right'] == 14216 - 2844     # every fifth answer is a shape, which AMBER's exact rule never reads
    if with_questions:
        assert sum(p['image_checked'] for p in doc['pairings']) == sum(p['text_checked'] for p in doc['pairings']) == 14216


def test_vlmevalkit_amber_text(shared, amber_table, tmp_path, capsys):
    "The text says why Avg ACC and the audited accuracy part."
    code, out, _ = run(capsys, 'score', write(amber_table, tmp_path/'AMBER_model.tsv'), '--questions', shared/'data/amber', '--boot', '0')
    assert code in (0, None) and 'as VLMEvalKit (AMBER) prints it' in out
    assert "the mean of the 3 dimensions' accuracies, not the accuracy over all 14216 questions" in out


def test_lmms_eval_amber_g_log(shared, tmp_path, capsys):
    "amber_g's discriminative docs score as AMBER, with or without the question files; lmms-eval prints no discriminative figure to audit."
    log = P.amber_lmms_log(shared, tmp_path/'20250101_samples_amber_g.jsonl')
    for extra in ([], ['--questions', shared/'data/amber']):
        doc = score(capsys, log, *extra)
        assert doc['kind'] == 'lmms-eval' and doc['benchmark'] == 'amber' and doc['as_printed'] == []
        sec = {(s['readout'], s['section']): s for s in doc['amber']['sections']}
        assert sec['amber', 'Descriminative Task']['right'] == 11372 and sec['amber', 'Exsitence']['questions'] == 4924
        assert sec['vlmeval_yorn', 'Attribute']['accuracy'] == pytest.approx(REF['amber_rating']['Attribute'])   # same answers as the table


@pytest.mark.parametrize('with_questions', [True, False])
def test_vlmevalkit_naturalbench(shared, nb_table, tmp_path, capsys, with_questions):
    "get_scores as VLMEvalKit's evaluate runs it, on the yes/no groups; the multiple-choice groups it pools are named in a note."
    f = write(nb_table.sample(frac=1, random_state=0), tmp_path/'NaturalBenchDataset_model.tsv')   # rows in any order: index orders them
    doc = score(capsys, f, *(['--questions', shared/'data/naturalbench/test_set.json'] if with_questions else []))
    assert doc['kind'] == 'vlmevalkit' and doc['benchmark'] == 'naturalbench'
    s = {r['readout']: r for r in doc['naturalbench']['scores']}
    assert s['naturalbench']['groups'] == 843
    assert ast.literal_eval(s['naturalbench']['as_printed']) == pytest.approx(REF['naturalbench_get_scores']['yes_no_groups'], abs=1e-12)
    assert any('pools the table\'s 107 multiple-choice groups' in n for n in doc['notes'])
    yn = write(P.naturalbench_vlmeval_table(shared, yes_no_only=True), tmp_path/'yes_no.tsv')
    doc = score(capsys, yn)                                            # a table of yes/no groups only: VLMEvalKit's own figures, no pooling note
    assert ast.literal_eval({r['readout']: r for r in doc['naturalbench']['scores']}['naturalbench']['as_printed']) == \
        pytest.approx(REF['naturalbench_get_scores']['yes_no_groups'], abs=1e-12)
    assert not any('multiple-choice' in n for n in doc['notes'])      # nothing pooled to name (the intervals' own note may stand)


def _amber_dup(t): return pd.concat([t, t.iloc[[3]]])
def _amber_third(t): return pd.concat([t, t[(t.image_path == 'AMBER_156.jpg') & (t.question == 'Is there a person in this image?')].iloc[[0]]])
def _amber_unknown(t): return t.assign(question=['Is there a unicorn in this image?'] + list(t.question[1:]))
def _amber_generative(t): return t.assign(category=list(t.category[:5]) + ['generative'] + list(t.category[6:]))
def _amber_wrong_type(t): return t.assign(category=['discriminative-hallucination'] + list(t.category[1:]))


@pytest.mark.parametrize('edit, questions, where, msg', [
    (_amber_dup, True, ':14218: field \'question\'', 'a second row for AMBER question 1008'),
    (_amber_third, True, ':14218: field \'question\'', 'a second row for AMBER question 9390'),
    (_amber_unknown, True, ':2: field \'question\'', 'this row matches no question'),
    (_amber_generative, True, ':7: field \'category\'', 'a generative (caption) item'),
    (_amber_wrong_type, True, ':2: field \'category\'', 'but AMBER question 1005 is amber-state'),
    (_amber_dup, False, ':14218: field \'index\'', "index 3 appears twice (first on row 5)"),
])
def test_vlmevalkit_amber_bad_input(shared, amber_table, tmp_path, capsys, edit, questions, where, msg):
    "Each refused with file, line (the table's row) and field, exit 2, nothing written."
    f = write(edit(amber_table), tmp_path/'AMBER_model.tsv')
    code, out, err = run(capsys, 'score', f, *(['--questions', shared/'data/amber'] if questions else []), '--out', tmp_path/'res', '--boot', '0')
    assert code == 2 and f'{f}{where}' in err and msg in err, err
    assert not (tmp_path/'res').exists()


def _log_lines(path): return path.read_text().splitlines(keepends=True)


@pytest.mark.parametrize('edit, questions, where, msg', [
    (lambda ls: ls[:9] + [json.dumps(dict(doc_id=9, doc=dict(question_id=7, task_type='generative', truth=[], hallu=[]), resps=[['A dog.']])) + '\n'],
     False, ":10: field 'doc.task_type'", 'a generative (caption) item'),
    (lambda ls: [json.dumps(dict(doc_id=0, doc=dict(question_id=7, truth=[], hallu=[]), resps=[['A dog.']], amber_chair={})) + '\n'] + ls[1:9],
     False, ":1: field 'doc.task_type'", 'a generative (caption) item'),          # amber_g's own generative docs carry no task_type
    (lambda ls: ls[:9] + [ls[2]], False, ":10: field 'doc.question_id'", 'id 1007 is answered twice (first on line 3)'),
    (lambda ls: ls[:9] + [ls[2].replace('"question_id": 1007', '"question_id": 99999')], True, ":10: field 'doc.question_id'",
     'id 99999 is not a discriminative question'),
])
def test_lmms_eval_amber_bad_input(shared, tmp_path, capsys, edit, questions, where, msg):
    log = P.amber_lmms_log(shared, tmp_path/'samples_amber_g.jsonl')
    log.write_text(''.join(edit(_log_lines(log))))
    code, out, err = run(capsys, 'score', log, *(['--questions', shared/'data/amber'] if questions else []), '--boot', '0')
    assert code == 2 and f'{log}{where}' in err and msg in err, err


def row_line(f, k) -> int:
    "The line on which data row k of a TSV ends (the multiple-choice questions hold newlines)."
    with open(f, newline='') as fh:                 # closed: an open file left to the collector is a ResourceWarning
        rd = csv.reader(fh, delimiter='\t')
        for i, _ in enumerate(rd):
            if i == k + 1: return rd.line_num


@pytest.mark.parametrize('edit, questions, row, fld, msg', [
    (lambda t: t.iloc[:-1], False, 3796, 'index', 'the last 2x2 group is incomplete'),
    (lambda t: pd.concat([t, t.iloc[[5]]]), False, 3800, 'index', 'index 5 appears twice (first on row 7)'),
    (lambda t: t[t.type == 'yes_no'], True, 92, 'type', 'item 92 of the question set is not a yes/no question'),
    (lambda t: pd.concat([t, t.iloc[:4].assign(index=range(3800, 3804))]), True, 3800, 'index', 'match no question'),
    (lambda t: t.assign(answer=['No'] + list(t.answer[1:])), False, 0, 'answer', 'q0_i0 of a group is Yes'),
])
def test_vlmevalkit_naturalbench_bad_input(shared, nb_table, tmp_path, capsys, edit, questions, row, fld, msg):
    "Each refused with file, line and field, exit 2."
    f = write(edit(nb_table), tmp_path/'NaturalBenchDataset_model.tsv')
    code, out, err = run(capsys, 'score', f, *(['--questions', shared/'data/naturalbench/test_set.json'] if questions else []), '--boot', '0')
    assert code == 2 and f"{f}:{row_line(f, row)}: field '{fld}'" in err and msg in err, err


def test_benchmark_logs_print_no_pope_figures(shared, nb_table, tmp_path, capsys):
    "lmms-eval's naturalbench task prints Q/I/G-Acc, not pope_accuracy: a benchmark's log gets no POPE-style rows under as_printed; the multiple-choice groups both tools pool are named."
    items = json.loads((shared/'data/naturalbench/test_set.json').read_text())
    log = tmp_path/'samples_naturalbench.jsonl'
    log.write_text(''.join(json.dumps(dict(doc_id=i, doc=dict(Index=i, Question=o[0], Question_Type='yes_no' if o[3] == 'yes_no' else 'multiple_choice',
                                                              answer=o[2]), resps=[[o[2]]], filtered_resps=[o[2]])) + '\n' for i, o in enumerate(items)))
    for f, tool in ((log, "lmms-eval's naturalbench aggregation"), (write(nb_table, tmp_path/'NaturalBenchDataset_model.tsv'), "VLMEvalKit's evaluate")):
        doc = score(capsys, f)
        assert doc['benchmark'] == 'naturalbench' and doc['as_printed'] == []
        assert any(tool in n and '107 multiple-choice groups' in n and 'its 843 yes/no groups' in n for n in doc['notes'])    # both pool them
