"Every kind of bad input gets one clear message naming file, line and field, and exit code 2."
import json, subprocess, sys
import pytest
from pope_audit.cli import main

CLI = [sys.executable, '-c', 'from pope_audit.cli import main; main()']


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


# pope-audit lint: nothing read is never clean; what cannot be read is one line, without a traceback or a wait -------------

LINT_FIX = __import__('pathlib').Path(__file__).parent/'fixtures'/'lint'


def lint_run(tmp_path, *args, timeout=120):
    "`pope-audit lint` in a fresh process (a FIFO opened by mistake would hang it, the timeout would say so)."
    from pope_audit.core import shared_dir
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
