"Every kind of bad input gets one clear message naming file, line and field, and exit code 2."
import json, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest
from pope_audit.interface.cli import main
from conftest import run_cli

CLI = [sys.executable, '-c', 'from pope_audit.interface.cli import main; main()']


def cli(capsys, *args):
    with pytest.raises(SystemExit) as e: main([str(a) for a in args])
    return e.value.code, capsys.readouterr().err


def pope_file(path, rows):
    path.write_text(''.join((r if isinstance(r, str) else json.dumps(r)) + '\n' for r in rows))
    return path


Q = lambda i, label='yes', **kw: {'question_id': i, 'image': 'a.jpg', 'text': f'Is there a thing{i} in the image?', 'label': label, **kw}


@pytest.mark.parametrize('rows, message', [
    ([Q(1), '{"question_id": 2, "image": "a.jpg"'], "coco_pope_random.json:2: malformed JSON"),
    ([Q(1), {'question_id': 2, 'image': 'a.jpg', 'label': 'no'}], "coco_pope_random.json:2: field 'text': missing field"),
    ([Q(1, 'maybe')], "coco_pope_random.json:1: field 'label': label must be yes or no, got 'maybe'"),
    ([Q(1), Q(1, 'no')], "coco_pope_random.json:2: field 'question_id': duplicate question id 1"),
])
def test_bad_question_file(tmp_path, capsys, rows, message):
    f = pope_file(tmp_path/'coco_pope_random.json', rows)
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f)
    assert code == 2 and message in err, err


def test_answers_matching_no_question(tmp_path, capsys):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), Q(2, 'no')])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}, {'question_id': 7, 'text': 'No'}])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f)
    assert code == 2 and "answers.jsonl:2: field 'question_id': answer for question 7, which is not in the question set" in err


def test_split_with_no_questions(tmp_path, capsys):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), Q(2, 'no')])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f, '--splits', 'adversarial')
    assert code == 2 and "field 'split': split 'adversarial' has no questions" in err
    empty = pope_file(tmp_path/'coco_pope_popular.json', [])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', empty)
    assert code == 2 and "coco_pope_popular.json: no questions in split 'popular'" in err


def test_unreadable_tokenizer_and_bad_template(tmp_path, capsys, shared):
    (tmp_path/'broken.gguf').write_bytes(b'GGUF but not really')
    code, err = cli(capsys, 'probe', '--tokenizer', tmp_path/'broken.gguf')
    assert code == 2 and 'broken.gguf' in err and 'cannot load tokenizer' in err
    code, err = cli(capsys, 'probe', '--tokenizer', shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf', '--template', 'USER: <image> ASSISTANT:')
    assert code == 2 and "field 'template'" in err and '{question}' in err


def test_console_exit_code(tmp_path):
    "The real process exits with 2 and writes nothing to stdout."
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1, 'maybe')])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    r = subprocess.run(CLI + ['score', str(ans), '--kind', 'llava', '--questions', str(f)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == '' and "field 'label'" in r.stderr


def test_run_lists_missing_images_before_writing(tmp_path, capsys, tiny_dirs):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), {**Q(2, 'no'), 'image': 'b.jpg'}])
    (tmp_path/'img').mkdir()
    code, err = cli(capsys, 'run', '--model', tiny_dirs['llava15'], '--questions', f, '--images', tmp_path/'img', '--out', tmp_path/'out')
    assert code == 2 and '2 image(s) named by the questions are missing: a.jpg, b.jpg' in err
    assert not (tmp_path/'out').exists()


# --- issue 9: scoring-side inputs -----------------------------------------------------------------------------------

def llava_copy(shared):
    return ['--questions', shared/'data/pope/llava/llava_pope_test.jsonl', '--labels', shared/'data/pope/llava/coco']


@pytest.mark.parametrize('kind', ['llava', 'records'])
def test_non_utf8_answer_or_record_file(tmp_path, capsys, kind):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), Q(2, 'no')])
    if kind == 'llava':
        ans = tmp_path/'answers.jsonl'
        ans.write_bytes(b'{"question_id": 1, "text": "Yes"}\n{"question_id": 2, "text": "Non, pas de caf\xe9"}\n')
        code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f)
        assert code == 2 and 'answers.jsonl:2: not UTF-8 text (bad byte 0xe9' in err, err
    else:
        rec = {'split': 'random', 'question_id': 1, 'image': 'a.jpg', 'question': 'Is there a thing1 in the image?', 'label': 'yes', 'text': 'Yes'}
        (tmp_path/'run').mkdir()
        (tmp_path/'run'/'records.jsonl').write_bytes(json.dumps(rec).encode() + b'\n' + json.dumps({**rec, 'question_id': 2}).encode()[:-2] + b'\xff"}\n')
        code, err = cli(capsys, 'score', tmp_path/'run')
        assert code == 2 and 'records.jsonl:2: not UTF-8 text (bad byte 0xff' in err, err


def test_non_utf8_question_and_table_files(tmp_path, capsys):
    f = tmp_path/'coco_pope_random.json'
    f.write_bytes(json.dumps(Q(1)).encode() + b'\n' + json.dumps(Q(2, 'no')).encode().replace(b'thing2', b'thing\xe92') + b'\n')
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f)
    assert code == 2 and 'coco_pope_random.json:2: not UTF-8 text' in err, err
    t = tmp_path/'preds.csv'
    t.write_bytes(b'question_id,label,pred\n1,yes,yes\n2,no,n\xf6\n')
    code, err = cli(capsys, 'score', t, '--split', 'random')
    assert code == 2 and 'preds.csv:3: not UTF-8 text' in err, err


def test_unknown_readout_names(shared, capsys):
    a13 = shared/'data/pope/llava/answers/llava-v1.5-13b.jsonl'
    code, err = cli(capsys, 'score', a13, *llava_copy(shared), '--readouts', 'pope_parse,pope_prase')
    assert code == 2 and "unknown readout 'pope_prase'; the readouts are: two_token, eight_token, derived" in err and 'pope_parse' in err
    code, err = cli(capsys, 'reconstruct', a13, *llava_copy(shared), '--a', 'pope_parse', '--b', 'lmms_exakt')
    assert code == 2 and "unknown readout 'lmms_exakt'; the readouts are: " in err


def test_readout_that_does_not_apply(shared, capsys):
    "two_token on text-only answers: say which readouts apply and why this one does not (no pandas error)."
    a13 = shared/'data/pope/llava/answers/llava-v1.5-13b.jsonl'
    code, err = cli(capsys, 'score', a13, *llava_copy(shared), '--readouts', 'two_token')
    assert code == 2 and 'No objects to concatenate' not in err
    assert "readout 'two_token' needs first-step logits, which 8910 of the 8910 records of this llava file lack; " \
           "the readouts that apply to them are: pope_parse, lmms_exact, vlmeval_yorn" in err, err


def test_reconstruct_on_records_without_logits(tmp_path, capsys):
    recs = [{'split': 'random', 'question_id': i, 'image': 'a.jpg', 'question': f'Is there a thing{i} in the image?', 'label': l,
             'text': t} for i, (l, t) in enumerate([('yes', 'Yes'), ('no', 'No'), ('no', 'Yes.'), ('yes', 'No')], 1)]
    f = pope_file(tmp_path/'records.jsonl', recs)
    code, err = cli(capsys, 'reconstruct', f)
    assert code == 2 and 'TypeError' not in err
    assert "readout 'derived' needs first-step logits, which 4 of the 4 records of this records file lack" in err
    assert 'the readouts that apply to them are: pope_parse, lmms_exact, vlmeval_yorn' in err
    main(['reconstruct', str(f), '--a', 'pope_parse', '--b', 'lmms_exact', '--json'])     # a text readout can still be compared
    (r,) = json.loads(capsys.readouterr().out)
    assert (r['split'], r['n'], r['tn_to_fp'], r['fn_to_tp'], r['tp_to_fn'], r['fp_to_tn']) == ('random', 4, 0, 0, 0, 0)


@pytest.mark.parametrize('name, message', [
    ('no-such-dataset-anywhere', 'hf:no-such-dataset-anywhere: no such dataset folder, and the hub cannot give one'),
    ('FOLDER', 'not a dataset saved with save_to_disk'),
    ('', 'hf: needs a dataset id or a folder'),
])
def test_hf_name_missing_or_not_a_dataset(tmp_path, capsys, name, message):
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    if name == 'FOLDER': name = str(tmp_path)
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f'hf:{name}')
    assert code == 2 and message in err, err


@pytest.mark.parametrize('which', ['questions', 'answers', 'labels', 'llava-questions'])
def test_fifo_is_refused_not_read(tmp_path, which):
    "A FIFO would block the reader forever: every reader checks for a regular file first (the process must exit at once)."
    import os
    fifo = tmp_path/('coco_pope_random.json' if which in ('questions', 'labels') else 'pipe.jsonl')
    q = pope_file(tmp_path/'coco_pope_random.json', [Q(1)]) if which not in ('questions', 'labels') else None
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    qf = None
    if which == 'labels':
        (tmp_path/'lab').mkdir(); fifo = tmp_path/'lab'/'coco_pope_random.json'
        qf = pope_file(tmp_path/'llava_q.jsonl', [{'question_id': 10000001, 'image': 'a.jpg', 'text': 'Is there a cat in the image?', 'category': 'random'}])
    os.mkfifo(fifo)
    args = {'questions': ['score', ans, '--kind', 'llava', '--questions', fifo],
            'answers': ['score', fifo, '--kind', 'llava', '--questions', q],
            'labels': ['score', ans, '--kind', 'llava', '--questions', qf, '--labels', tmp_path/'lab'],
            'llava-questions': ['score', ans, '--kind', 'llava', '--questions', fifo, '--labels', tmp_path]}[which]
    r = subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and 'not a regular file' in r.stderr and fifo.name in r.stderr, r.stderr


@pytest.mark.parametrize('text, shown', [(['No'], 'a JSON array'), ({'answer': 'No'}, 'a JSON object'), (0, 'a number')])
def test_answer_text_that_is_not_a_string(tmp_path, capsys, text, shown):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), Q(2, 'no')])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}, {'question_id': 2, 'text': text}])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f)
    assert code == 2 and f"answers.jsonl:2: field 'text': answer text must be a string, got {shown}" in err, err


def test_lmms_response_that_is_not_a_string(tmp_path, capsys):
    doc = {'question_id': '1', 'question': 'Is there a thing1 in the image?', 'answer': 'yes', 'image_source': 'a.jpg', 'category': 'random'}
    f = pope_file(tmp_path/'lmms.jsonl', [{'doc_id': 0, 'doc': doc, 'resps': [[{'text': 'No'}]], 'filtered_resps': [{'text': 'No'}]}])
    code, err = cli(capsys, 'score', f)
    assert code == 2 and "lmms.jsonl:1: field 'filtered_resps': answer text must be a string, got a JSON object" in err, err


def test_label_file_error_names_the_label_file(tmp_path, capsys):
    (tmp_path/'lab').mkdir()
    pope_file(tmp_path/'lab'/'coco_pope_random.json', [Q(1), Q(2, 'maybe')])
    qf = pope_file(tmp_path/'llava_q.jsonl', [{'question_id': 10000000 + i, 'image': 'a.jpg', 'text': Q(i)['text'], 'category': 'random'} for i in (1, 2)])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 10000001, 'text': 'Yes'}])
    code, err = cli(capsys, 'score', ans, '--questions', qf, '--labels', tmp_path/'lab')
    assert code == 2 and "lab/coco_pope_random.json:2: field 'label': label must be yes or no, got 'maybe'" in err, err
    assert 'llava_q.jsonl' not in err


def test_labels_that_cannot_apply(tmp_path, capsys, shared):
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    code, err = cli(capsys, 'score', ans, '--questions', shared/'data/pope/coco', '--labels', shared/'data/pope/llava/coco')
    assert code == 2 and "--labels goes with LLaVA's question file only" in err
    code, err = cli(capsys, 'score', ans, '--labels', shared/'data/pope/llava/coco')
    assert code == 2 and '--labels goes with --questions' in err


REC = {'split': 'random', 'question_id': 1, 'image': 'a.jpg', 'question': 'Is there a thing1 in the image?', 'label': 'yes', 'text': 'Yes'}
LMMS_DOC = {'question_id': '1', 'question': 'Is there a thing1 in the image?', 'answer': 'yes', 'image_source': 'a.jpg', 'category': 'random'}


@pytest.mark.parametrize('name, content, extra, message', [
    ('e.jsonl', '', ['--kind', 'llava', '--questions', 'Q'], 'e.jsonl: no answers in this file'),
    ('rg.csv', 'question_id,label,p\n1,yes,yes,extra\n', ['--split', 'random'], 'rg.csv:2: 4 fields, but the header has 3'),
    ('dup.csv', 'question_id,label,p,p\n1,yes,yes,no\n', ['--split', 'random'], 'dup.csv:1: a column name appears twice'),
    ('v.tsv', 'index\tquestion\tanswer\tprediction\tcategory\n1\tIs there a dog in the image?\tYes\tYes\t\n', [], "v.tsv:2: field 'category': missing value"),
    ('lm.jsonl', json.dumps({'doc_id': 0, 'doc': {**LMMS_DOC, 'question_id': None}, 'resps': [['Yes']]}), [], "lm.jsonl:1: field 'doc.question_id': missing field"),
    ('r.jsonl', json.dumps({**REC, 'derived': 'x', 'logits': {'1': 0.5}}), [], "r.jsonl:1: field 'derived': derived must map yes and no to lists of token ids"),
    ('ok.csv', 'question_id,label,p\n1,yes,yes\n', ['--split', 'random', '--boot', '-1'], "field 'boot': the number of bootstrap resamples must be 0 or more"),
    ('ok.csv', 'question_id,label,p\n1,yes,yes\n', ['--split', 'random', '--splits', 'popular'], "ok.csv: field 'splits': no rows in the splits asked for (popular)"),
    ('a.jsonl', '{"question_id": 1, "text": "Yes"}', ['--questions', 'Q', '--split', 'random'], '--split names the split of a predictions table'),
])
def test_more_damaged_inputs(tmp_path, capsys, name, content, extra, message):
    "The general case: damaged files and options beyond the issue's list still get one located message and exit 2."
    q = pope_file(tmp_path/'coco_pope_random.json', [Q(1), Q(2, 'no')])
    f = tmp_path/name
    f.write_text(content + ('\n' if content else ''))
    code, err = cli(capsys, 'score', f, *[q if a == 'Q' else a for a in extra])
    assert code == 2 and message in err and 'Traceback' not in err, err


def test_question_fields_must_be_strings(tmp_path, capsys):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), {**Q(2), 'text': ['Is there a cat in the image?']}])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    code, err = cli(capsys, 'score', ans, '--questions', f)
    assert code == 2 and "coco_pope_random.json:2: field 'text': must be a string" in err, err


@pytest.mark.parametrize('line, message', [
    ('null', "r.jsonl:2: expected a JSON object"),
    ('[1, 2]', "r.jsonl:2: expected a JSON object"),
    (json.dumps({**REC, 'question_id': 2, 'split': ['random']}), "r.jsonl:2: field 'split': must be a string"),
    (json.dumps({**REC, 'question_id': [2]}), "r.jsonl:2: field 'question_id': question id must be a number or a string, got [2]"),
    (json.dumps({**REC, 'question_id': True}), "r.jsonl:2: field 'question_id': question id must be a number or a string, got True"),
])
@pytest.mark.parametrize('command', [['score'], ['reconstruct'], ['export', '--parquet']])
def test_damaged_record_line(tmp_path, capsys, line, message, command):
    "A records line that is not an object, or whose split or id no question can have, stops every command that reads records."
    f = tmp_path/'r.jsonl'
    f.write_text(json.dumps(REC) + '\n' + line + '\n')
    code, err = cli(capsys, command[0], f, *command[1:])
    assert code == 2 and message in err and 'Traceback' not in err, err
    assert not list(tmp_path.glob('*.parquet'))


@pytest.mark.parametrize('field, value, message', [
    ('greedy_id', 'x', "r.jsonl:2: field 'greedy_id': greedy_id must be a whole number, got 'x'"),
    ('margin', 'x', "r.jsonl:2: field 'margin': margin must be a number, got 'x'"),
    ('topk', 'x', "r.jsonl:2: field 'topk': topk must be a list of token ids"),
])
def test_export_refuses_what_parquet_cannot_hold(tmp_path, capsys, field, value, message):
    "A value the Parquet schema's number columns cannot hold is named by line and field, and no half-written file remains."
    f = tmp_path/'r.jsonl'
    f.write_text(json.dumps(REC) + '\n' + json.dumps({**REC, 'question_id': 2, field: value}) + '\n')
    code, err = cli(capsys, 'export', f, '--parquet')
    assert code == 2 and message in err and 'Traceback' not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['r.jsonl']


@pytest.mark.parametrize('flag', [['--splits', 'random'], ['--relabel', 'repope']])
def test_parquet_export_refuses_what_needs_the_records(tmp_path, capsys, flag):
    "The Parquet export scores as records; options that need the records themselves are refused by name, nothing written."
    f = tmp_path/'r.jsonl'
    f.write_text(json.dumps(REC) + '\n' + json.dumps({**REC, 'question_id': 2}) + '\n')
    main(['export', str(f), '--parquet'])
    code, err = cli(capsys, 'score', tmp_path/'r.parquet', *flag, '--out', tmp_path/'scored')
    assert code == 2 and f"r.parquet: field '{flag[0][2:]}': {flag[0]} needs the records themselves" in err, err
    assert not (tmp_path/'scored').exists()

def test_parquet_that_is_not_the_export_as_records(tmp_path, capsys):
    "`--kind records` on a Parquet table that is not pope-audit's export: one line naming the file and the option, no traceback."
    pd.DataFrame({'question_id': [1, 2], 'label': ['yes', 'no'], 'answer': ['yes', 'no']}).to_parquet(tmp_path/'p.parquet')
    code, err = cli(capsys, 'score', tmp_path/'p.parquet', '--kind', 'records', '--boot', 0)
    assert code == 2 and "p.parquet: field 'kind': --kind records: this Parquet file is not" in err and 'Traceback' not in err, err

# --- issue 41: the newer surfaces (other benchmarks' files, several files as one run, the report, the environment) ------

MME_DOC = lambda img, q, a, t='existence': {'question_id': f'{t}/{img}', 'question': f'{q} Please answer yes or no.', 'answer': a, 'category': t}
MME_LOG = [MME_DOC('a.jpg', 'Is there a dog in this image?', 'Yes'), MME_DOC('a.jpg', 'Is there a cat in this image?', 'No'),
           MME_DOC('b.jpg', 'Is there a car in this image?', 'Yes'), MME_DOC('b.jpg', 'Is there a bus in this image?', 'No')]


def lmms_log(path, docs, resps):
    return pope_file(path, [{'doc_id': i, 'doc': d, 'resps': [[r]], 'filtered_resps': [r]} for i, (d, r) in enumerate(zip(docs, resps))])


def pope_docs(n=4):
    return [{**LMMS_DOC, 'question_id': str(i), 'question': f'Is there a thing{i} in the image?', 'answer': 'yes' if i % 2 else 'no'} for i in range(1, n + 1)]


def mixed_folder(tmp_path):
    "A tool's output folder holding a POPE log (4 answers, 3 right: TP 2, FP 1, TN 1) and an MME log (4 answers, all right)."
    (tmp_path/'logs').mkdir()
    lmms_log(tmp_path/'logs'/'pope_random.jsonl', pope_docs(), ['Yes', 'Yes', 'Yes', 'No'])
    lmms_log(tmp_path/'logs'/'mme_samples.jsonl', MME_LOG, ['Yes', 'No', 'Yes', 'No'])
    return tmp_path/'logs'


@pytest.mark.parametrize('command', [['score'], ['reconstruct', '--a', 'pope_parse', '--b', 'lmms_exact'], ['report', '--out', 'REP']])
def test_several_benchmarks_are_not_one_run(tmp_path, capsys, command):
    "A POPE log beside an MME log was one pooled F1 (exit 0): refused in one line naming each file's benchmark, nothing written."
    logs = mixed_folder(tmp_path)
    code, err = cli(capsys, command[0], logs, *[tmp_path/'rep' if a == 'REP' else a for a in command[1:]])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "field 'answers': answers of several benchmarks given together (MME: " in err and 'mme_samples.jsonl; POPE: ' in err and 'pope_random.jsonl)' in err
    assert '--per-benchmark' in err and not (tmp_path/'rep').exists()


def test_one_file_of_several_benchmarks(tmp_path, capsys):
    f = tmp_path/'preds.csv'
    f.write_text('split,question_id,label,p\nrandom,1,yes,yes\nrandom,2,no,no\nexistence,1,yes,yes\nexistence,2,no,yes\n')
    code, err = cli(capsys, 'score', f)
    assert code == 2 and "preds.csv: field 'split': this file holds answers of several benchmarks (POPE: random; MME: existence)" in err, err


def test_per_benchmark_sections(tmp_path, capsys):
    "--per-benchmark: each benchmark its own section; nothing of one is pooled with the other (values by hand)."
    code, out, err = run_cli(capsys, 'score', mixed_folder(tmp_path), '--per-benchmark', '--json', '--boot', '0', '--out', tmp_path/'res')
    assert code in (0, None), err
    secs = {s['benchmark']: s for s in json.loads(out)['per_benchmark']}
    assert sorted(secs) == ['mme', 'pope'] and [Path(f).name for f in secs['pope']['files']] == ['pope_random.jsonl']
    pope = {(r['readout'], r['split']): r for r in secs['pope']['scores']}
    assert {s for _, s in pope} == {'random'}                                           # one split each: no pooled row to mix them
    r = pope['pope_parse', 'random']
    assert (r['n'], r['tp'], r['fp'], r['tn'], r['fn'], r['f1']) == (4, 2, 1, 1, 0, pytest.approx(0.8))      # 2·2 / (2·2 + 1 + 0)
    assert {r['split'] for r in secs['mme']['scores']} == {'existence'}
    tot = {t['group']: t for t in secs['mme']['mme']['totals'] if t['readout'] == 'mme'}
    assert tot['Perception']['score'] == 200.0                                          # acc 100 + acc+ 100 on existence
    csv = (tmp_path/'res'/'scores.csv').read_text().splitlines()
    assert csv[0].startswith('benchmark,readout,split') and {l.split(',')[0] for l in csv[1:]} == {'pope', 'mme'}


def mme_table(path, rows):
    pd.DataFrame(rows).to_csv(path, sep='\t', index=False)
    return path


MME_ROWS = [dict(index=i, question=d['question'], answer=d['answer'], prediction=d['answer'], category=d['category'], image_path=d['question_id'])
            for i, d in enumerate(MME_LOG)]


@pytest.mark.parametrize('rows, message', [
    ([{k: v for k, v in r.items() if k != 'image_path'} for r in MME_ROWS[:2] + MME_ROWS[1:]],
     "MME_model.tsv: field 'image_path': table lacks column 'image_path'"),
    (MME_ROWS[:2] + MME_ROWS[1:2] + MME_ROWS[2:], "MME_model.tsv:4: field 'question': image 'existence/a.jpg' of existence is asked the same question again (first on line 3)"),
    (MME_ROWS[:2] + [dict(MME_ROWS[0], question='Is there a fox in this image?')] + MME_ROWS[2:], "MME_model.tsv:4: field 'image': image 'existence/a.jpg' has a third question"),
    ([dict(r, image_path='') if i == 2 else r for i, r in enumerate(MME_ROWS)], "MME_model.tsv:4: field 'image_path': missing value"),
    (MME_ROWS[:3], "MME_model.tsv:4: field 'image': image 'existence/b.jpg' of existence is answered once"),
])
def test_mme_table_pairs_by_image(tmp_path, capsys, rows, message):
    "An MME table without its image column, or with a row repeated, shifted every later pair (Perception moved, exit 0)."
    code, err = cli(capsys, 'score', mme_table(tmp_path/'MME_model.tsv', rows))
    assert code == 2 and message in err, err


def test_mme_result_folder_line_repeated(tmp_path, capsys, shared):
    "A result line written over its pair's: the same question twice for one image."
    res = tmp_path/'res'; res.mkdir()
    lines = [l.rstrip('\n') + '\tYes\n' for l in (shared/'data/mme/questions/existence.txt').read_text().splitlines(keepends=True)]
    lines[1] = lines[0]
    (res/'existence.txt').write_text(''.join(lines))
    code, err = cli(capsys, 'score', res, '--splits', 'existence')
    assert code == 2 and "existence.txt:2: field 'question': image '000000006040.jpg' is asked the same question on lines 1 and 2" in err, err


AMBER_ROWS = [dict(index=0, question='Is the sky sunny in this image?', answer='yes', category='discriminative-attribute-state', image_path='AMBER_1.jpg', prediction='Yes'),
              dict(index=1, question='Is the sky gloomy in this image?', answer='no', category='discriminative-attribute-state', image_path='AMBER_1.jpg', prediction='No')]


@pytest.mark.parametrize('drop', ['image_path', 'answer'])
def test_amber_table_missing_a_column(tmp_path, capsys, drop):
    "An AMBER table without its image column was scored as a POPE table, yes the positive class (exit 0)."
    f = tmp_path/'AMBER_model.tsv'
    pd.DataFrame(AMBER_ROWS).drop(columns=drop).to_csv(f, sep='\t', index=False)
    code, err = cli(capsys, 'score', f)
    assert code == 2 and f"AMBER_model.tsv: field '{drop}': table lacks column '{drop}'" in err, err


def hallusion_results(shared, path, edit):
    rows = [dict(r, model_prediction='Yes') for r in json.loads((shared/'data/hallusionbench/HallusionBench.json').read_text())]
    edit(rows)
    path.write_text(json.dumps(rows))
    return path


@pytest.mark.parametrize('edit, questions, message', [
    (dict(category='XX'), False, "field '[5].category': category is VD (visual dependent) or VS (visual supplement), got 'XX'"),
    (dict(category='vs'), True, "field '[5].category': category is VD (visual dependent) or VS (visual supplement), got 'vs'"),
    (dict(subcategory='ch/art'), False, "field '[5].subcategory': 'ch/art' is not a subcategory of VS (its subcategories: chart, map, ocr, table)"),
    (dict(subcategory='video'), False, "field '[5].subcategory': 'video' is not a subcategory of VS"),
    (dict(figure_id='1/2'), False, "field '[5].figure_id': figure_id is a whole number, got '1/2'"),
])
def test_hallusion_keys_checked(tmp_path, capsys, shared, edit, questions, message):
    "An unknown category was dropped from the figures (exit 0), a '/' ended in a pandas traceback, a wrong case blamed question_id."
    f = hallusion_results(shared, tmp_path/'res.json', lambda r: r[5].update(edit))
    code, err = cli(capsys, 'score', f, '--boot', '0', *(['--questions', shared/'data/hallusionbench/HallusionBench.json'] if questions else []))
    assert code == 2 and f'res.json: {message}' in err and 'Traceback' not in err, err


def test_hallusion_log_names_line(tmp_path, capsys, shared):
    rows = json.loads((shared/'data/hallusionbench/HallusionBench.json').read_text())[178:181]
    rows[2]['category'] = 'VX'
    lmms_log(tmp_path/'samples_hallusion_bench_image.jsonl', rows, ['Yes'] * 3)
    code, err = cli(capsys, 'score', tmp_path/'samples_hallusion_bench_image.jsonl')
    assert code == 2 and "samples_hallusion_bench_image.jsonl:3: field 'doc.category': category is VD" in err, err


def test_naturalbench_types_checked(tmp_path, capsys, shared):
    "A type other than the file's own was skipped as a multiple-choice group: refused at its item."
    items = json.loads((shared/'data/naturalbench/test_set.json').read_text())
    items[12][3] = 'yes-no'
    (tmp_path/'test_set.json').write_text(json.dumps(items))
    (tmp_path/'out.json').write_text(json.dumps(['Yes'] * len(items)))
    code, err = cli(capsys, 'score', tmp_path/'out.json', '--questions', tmp_path/'test_set.json')
    assert code == 2 and "test_set.json: field '[12][3]': type is yes_no or mcq, got 'yes-no'" in err, err
    doc = {'Index': 0, 'Question': 'Is it?', 'Question_Type': 'Yes_No', 'answer': 'Yes'}
    lmms_log(tmp_path/'samples_naturalbench.jsonl', [doc], ['Yes'])
    code, err = cli(capsys, 'score', tmp_path/'samples_naturalbench.jsonl')
    assert code == 2 and "samples_naturalbench.jsonl:1: field 'doc.Question_Type': Question_Type is yes_no or multiple_choice, got 'Yes_No'" in err, err


@pytest.mark.parametrize('doc, questions, message', [
    ([], 'amber', 'r.json: an empty JSON list: no answers in this file'),
    (['Yes', None, 'No', 'Yes'], 'naturalbench/test_set.json', "r.json: field '[1]': a response is a string, got null"),
    ([{'id': 1005}], 'amber', "r.json: field '[0]': a JSON list whose first item is {\"id\": 1005}: not AMBER's response file"),
])
def test_json_lists_are_not_line_aligned(tmp_path, capsys, shared, doc, questions, message):
    "An empty AMBER list or a null NaturalBench response was read as the paper's line-aligned predictions."
    (tmp_path/'r.json').write_text(json.dumps(doc))
    code, err = cli(capsys, 'score', tmp_path/'r.json', '--questions', shared/'data'/questions)
    assert code == 2 and message in err and 'line-aligned' not in err, err


@pytest.mark.parametrize('where, message', [('log', "pope.jsonl:2: field 'doc.category': 'existence' is not a POPE split"),
                                            ('table', "v.tsv:3: field 'category': 'randon' is not a POPE split")])
def test_pope_logs_name_pope_splits(tmp_path, capsys, where, message):
    if where == 'log': f = lmms_log(tmp_path/'pope.jsonl', [LMMS_DOC, {**LMMS_DOC, 'question_id': '2', 'category': 'existence'}], ['Yes', 'No'])
    else:
        f = tmp_path/'v.tsv'
        f.write_text('index\tquestion\tanswer\tprediction\tcategory\n0\tIs there a dog in the image?\tYes\tYes\trandom\n1\tIs there a cat in the image?\tNo\tNo\trandon\n')
    code, err = cli(capsys, 'score', f)
    assert code == 2 and message in err, err


def text_records(folder, n, manifest=None):
    folder.mkdir()
    pope_file(folder/'records.jsonl', [{**REC, 'question_id': i, 'question': f'Is there a thing{i} in the image?', 'label': 'yes' if i % 2 else 'no',
                                        'text': 'Yes' if i % 3 else 'No'} for i in range(1, n + 1)])
    if manifest: (folder/'manifest.json').write_text(json.dumps(manifest))
    return folder


def test_report_refuses_before_writing(tmp_path, capsys):
    "A figures path that is a file, and a records file with no record, were tracebacks (score refused the same folder)."
    run = text_records(tmp_path/'run', 6)
    (run/'figures').write_text('a file')
    code, err = cli(capsys, 'report', run)
    assert code == 2 and "run/figures: field 'out': the report's figures folder is a file" in err, err
    (run/'figures').unlink(); (run/'records.jsonl').write_text('\n')
    code, err = cli(capsys, 'report', run)
    assert code == 2 and 'run/records.jsonl: no records: nothing to report' in err, err
    assert sorted(p.name for p in run.iterdir()) == ['records.jsonl']


def test_report_status_row_follows_the_records(tmp_path, capsys):
    "A manifest saying complete over records that lack questions: the table of what ran says incomplete, as the lead does."
    run = text_records(tmp_path/'run', 4, dict(identity={'model': 'm'}, questions=6, status='complete'))
    code, out, err = run_cli(capsys, 'report', run)
    assert code in (0, None), err
    md = (run/'report.md').read_text()
    assert 'incomplete run: 4 of 6 questions answered, 2 lacking' in md
    row = next(l for l in md.splitlines() if l.startswith('| run |'))
    assert row.startswith("| run | incomplete (4 of 6 questions answered; the manifest says 'complete')"), row


@pytest.mark.parametrize('env, message', [
    ({'POPE_AUDIT_CACHE': 'FILE'}, "field 'POPE_AUDIT_CACHE': the cache folder (POPE_AUDIT_CACHE) is a file"),
    ({'POPE_AUDIT_CACHE': ''}, "field 'POPE_AUDIT_CACHE': POPE_AUDIT_CACHE is set but empty"),
    ({'POPE_AUDIT_CACHE': 'FILE/sub'}, 'lies below a file'),
    ({'RANK': 'zero', 'WORLD_SIZE': '2'}, "field 'RANK': RANK must be a whole number"),
    ({'RANK': '0', 'WORLD_SIZE': 'x'}, "field 'WORLD_SIZE': WORLD_SIZE must be a whole number"),
    ({'RANK': '1'}, "field 'RANK': RANK=1 is set without WORLD_SIZE"),
    ({'RANK': '0', 'WORLD_SIZE': '2'}, "field 'WORLD_SIZE': WORLD_SIZE=2 without a launcher"),
    ({'POPE_AUDIT_FAULT': 'answer'}, "field 'POPE_AUDIT_FAULT': unknown fault point 'answer'"),
    ({'POPE_AUDIT_FAULT': 'answering@one'}, "field 'POPE_AUDIT_FAULT': 'answering@one': a fault point names a rank as a whole number"),
])
def test_environment_checked_before_anything_is_written(tmp_path, capsys, monkeypatch, env, message):
    "Tracebacks (cache a file, torch.distributed), a cache in the working folder, a fault variable checked after the run folder was written."
    (tmp_path/'file').write_text('x')
    for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'POPE_AUDIT_FAULT'): monkeypatch.delenv(k, raising=False)
    for k, v in env.items(): monkeypatch.setenv(k, v.replace('FILE', str(tmp_path/'file')))
    monkeypatch.chdir(tmp_path)
    code, err = cli(capsys, '--log-file', tmp_path/'log.txt', 'demo', '--out', tmp_path/'demo', '--images', '2')
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['file']


@pytest.mark.parametrize('args', [['ls', 'readouts'], ['probe', '--tokenizer', 'GGUF']])
def test_closed_output_ends_quietly(shared, args):
    "`pope-audit probe … | head -1` ended in a BrokenPipeError traceback, exit 1: now no word, and a pipe writer's status."
    gguf = str(shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf')
    p = subprocess.Popen(CLI + [gguf if a == 'GGUF' else a for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                                        # the reader is gone before the first line is written
    with p.stderr: err = p.stderr.read().decode()
    assert (p.wait(timeout=120), err) == (141, '')


def test_question_without_image_names_it(tmp_path, capsys, shared):
    "HallusionBench's no-image questions: the message named neither a question nor how to leave them out (refused before any model loads)."
    (tmp_path/'img').mkdir()
    code, err = cli(capsys, 'run', '--model', 'no-such/model', '--questions', shared/'data/hallusionbench/HallusionBench.json',
                    '--images', tmp_path/'img', '--out', tmp_path/'out')
    assert code == 2 and "field 'image': question hallusion-VS-noimage/'VS/chart/0/0/0' and 177 more: has no image" in err, err
    assert 'leave its split out (--splits hallusion-VS hallusion-VD)' in err and not (tmp_path/'out').exists()
@pytest.fixture
def qwen3_named(shared, tmp_path):
    "The Qwen3 vocabulary with two named chat templates and none named default."
    import shutil
    d = tmp_path/'named'
    shutil.copytree(shared/'tokenizers/qwen3', d)
    cfg = json.loads((d/'tokenizer_config.json').read_text())
    cfg['chat_template'] = [{'name': 'rag', 'template': cfg['chat_template']}, {'name': 'tool_use', 'template': cfg['chat_template']}]
    (d/'tokenizer_config.json').write_text(json.dumps(cfg))
    return d


def test_chat_template_names(capsys, shared, qwen3_named):
    code, err = cli(capsys, 'probe', '--tokenizer', shared/'tokenizers/qwen3', '--chat-template', 'nope')
    assert code == 2 and err.count('\n') == 1 and "field 'chat-template': no chat template named 'nope'" in err and '(its templates: default)' in err, err
    # several named templates and none named default: refused as transformers refuses, the names listed
    code, err = cli(capsys, 'probe', '--tokenizer', qwen3_named)
    assert code == 2 and err.count('\n') == 1 and 'none named default: choose one with --chat-template NAME (rag, tool_use)' in err, err
    code, err = cli(capsys, 'probe', '--tokenizer', shared/'tokenizers/qwen3', '--template', 'llava15', '--chat-template', 'default')
    assert code == 2 and "field 'chat-template'" in err


@pytest.mark.parametrize('content, message', [
    (b'USER: {question}\nASSISTANT:\xff\n', "t.txt:2: not UTF-8 text (bad byte 0xff at column 11)"),
    (b'USER: <image>\nASSISTANT:', "t.txt: field 'template-file': a template needs exactly one {question} slot, found 0"),
    (b'{question} {question}', "found 2"),
])
def test_bad_template_file(tmp_path, capsys, shared, tiny_dirs, content, message):
    (tmp_path/'t.txt').write_bytes(content)
    code, err = cli(capsys, 'probe', '--tokenizer', shared/'tokenizers/qwen3', '--template-file', tmp_path/'t.txt')
    assert code == 2 and err.count('\n') == 1 and message in err, err
    code, err = cli(capsys, 'run', '--model', tiny_dirs['llava15'], '--questions', tmp_path/'t.txt', '--images', tmp_path, '--out', tmp_path/'out',
                    '--template-file', tmp_path/'t.txt')
    assert code == 2 and message in err and not (tmp_path/'out').exists(), err


def test_template_and_template_file_together(tmp_path, capsys, shared, tiny_dirs):
    (tmp_path/'t.txt').write_text('USER: {question}\nASSISTANT:\n')
    for cmd in (['probe', '--tokenizer', shared/'tokenizers/qwen3'], ['lint', tmp_path, '--tokenizer', shared/'tokenizers/qwen3'],
                ['run', '--model', tiny_dirs['llava15'], '--questions', tmp_path/'t.txt', '--images', tmp_path, '--out', tmp_path/'out']):
        code, err = cli(capsys, *cmd, '--template', 'llava15', '--template-file', tmp_path/'t.txt')
        assert code == 2 and err.count('\n') == 1 and "field 'template-file': --template and --template-file each give the template" in err, err
    assert not (tmp_path/'out').exists()
# pope-audit lint: nothing read is never clean; what cannot be read is one line, without a traceback or a wait -------------

LINT_FIX = __import__('pathlib').Path(__file__).parent/'fixtures'/'lint'


def lint_run(tmp_path, *args, timeout=120):
    "`pope-audit lint` in a fresh process (a FIFO opened by mistake would hang it, the timeout would say so)."
    from pope_audit.foundation.core import shared_dir
    gguf = shared_dir(required=True)/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    return subprocess.run(CLI + ['lint', *map(str, args), '--tokenizer', str(gguf)], capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


@pytest.mark.parametrize('make, args, line', [
    (lambda d: (d/'empty').mkdir(), ['empty'], 'nothing read: no Python file or notebook in empty'),
    (lambda d: ((d/'docs').mkdir(), (d/'docs/readme.md').write_text('no code')), ['docs'], 'nothing read: no Python file or notebook in docs'),
    (lambda d: ((d/'code').mkdir(), (d/'code/a.py').write_text('x = 1\n')), ['code', '--exclude', '*.py'], 'nothing read: every Python file was excluded'),
    (lambda d: None, ['gone.py'], 'gone.py: no such file or folder'),
    (lambda d: (d/'notes.txt').write_text('hi'), ['notes.txt'], 'notes.txt: not a Python file or notebook'),
    (lambda d: __import__('os').mkfifo(d/'pipe.py'), ['pipe.py'], 'pipe.py: a FIFO, not a file: refused unread'),
])
def test_lint_reads_nothing(tmp_path, shared, make, args, line):
    "An empty folder, a folder without Python, everything excluded, a wrong path, a FIFO: exit 2 with one line, nothing on stdout."
    make(tmp_path)
    r = lint_run(tmp_path, *args)
    assert (r.returncode, r.stderr.strip(), r.stdout) == (2, line, ''), r.stderr


@pytest.mark.parametrize('name, content, message', [
    ('broken.py', 'def f(:\n    return 1\n', 'broken.py:1: syntax error: invalid syntax'),
    ('deep.py', 'x = ' + '+'.join(['1'] * 100_000) + '\n', 'deep.py: nested too deeply for the Python parser'),
    ('latin.py', '# coding: latin-1\nYES_ID = 3582  # é\n'.encode('latin-1'), None),
    ('plain.py', 'A = "é"\n'.encode('latin-1'), 'plain.py: not UTF-8 text (byte 5)'),
    ('cells.ipynb', json.dumps({'cells': [{'cell_type': 'code', 'source': 42}]}), 'cells.ipynb:cell 1: a code cell whose source is not text (int)'),
    ('blob.py', b'\0\1binary', 'blob.py: a binary file, not Python'),
])
def test_lint_unreadable_file_beside_a_read_one(tmp_path, shared, name, content, message):
    "A file lint cannot read is one line; with another file read the exit is 0, under --strict 1. A coding cookie decides the decoding."
    (tmp_path/'ok.py').write_text('x = 1\n')
    (tmp_path/name).write_bytes(content if isinstance(content, bytes) else content.encode())
    r = lint_run(tmp_path, '.')
    if message is None:                                          # the cookie is honoured: the file is read, its excluded id found
        assert r.returncode == 1 and 'latin.py:2: [WRONG] id excluded' in r.stdout, r.stdout + r.stderr
        return
    assert r.returncode == 0 and f'{message} (not read)' in r.stdout and 'Traceback' not in r.stdout + r.stderr, r.stdout + r.stderr
    assert lint_run(tmp_path, '.', '--strict').returncode == 1
