"`pope-audit lint` on evaluation code written in the field's shapes, under the real LLaMA-2 and Qwen2 vocabularies."
import json, subprocess, sys
from pathlib import Path
import pytest
import yaml
from pope_audit.cli import main
from pope_audit.lint import BATTERY, lint, read_sources, scan, greedy_reading

FIX = Path(__file__).parent/'fixtures'/'lint'
ROOT = Path(__file__).parent.parent


@pytest.fixture(scope='module')
def llama(shared):
    from pope_audit.tokens import shared_tokenizer
    return shared_tokenizer('llama-spm')


@pytest.fixture(scope='module')
def qwen(shared):
    from pope_audit.tokens import shared_tokenizer
    return shared_tokenizer('qwen2')


def by_line(report, name):
    return {f.line: f for f in report.findings if Path(f.file).name == name}


def run_cli(capsys, *args):
    "The CLI in this process: (exit code, stdout)."
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e: code = e.code
    return code, capsys.readouterr().out


def test_llama_ids(llama):
    "The paper's pair 3582/1217 is excluded under LLaVA-1.5's template; 3869/1939 are what the model emits there."
    r = lint([FIX/'field/two_token_logits.py', FIX/'field/transferred_ids.py'], llama, 'llava15')
    two, moved = by_line(r, 'two_token_logits.py'), by_line(r, 'transferred_ids.py')
    assert [(two[n].ids, two[n].spells, two[n].verdict) for n in (8, 9, 13)] == [
        ([3582], ['yes'], 'excluded'), ([1217], ['no'], 'excluded'), ([3869], [' Yes'], 'derived')]
    assert [(moved[n].ids, moved[n].verdict) for n in (4, 5, 9)] == [([3869], 'derived'), ([1939], 'derived'), ([3869, 1939], 'derived')]
    assert two[8].fix == "use the derived ids (max over each set): yes 3869 ' Yes', 4874 ' yes'"
    assert r.exit_code() == 1


def test_qwen2_spells_llama_ids_otherwise(qwen):
    "LLaMA's ' Yes'/' No' ids carried to Qwen2 spell ' }}' and '?\\n\\n' there; the fix names Qwen2's own ids."
    r = lint([FIX/'field/transferred_ids.py'], qwen, 'llava15')
    f = by_line(r, 'transferred_ids.py')
    assert (f[4].spells, f[4].verdict, f[5].spells, f[5].verdict) == ([' }}'], 'unrelated', ['?\n\n'], 'unrelated')
    assert f[4].fix == "use the derived ids (max over each set): yes 7414 ' Yes', 9834 ' yes'"


def test_bos_lookup(llama, qwen):
    "encode('Yes')[0] on LLaMA's BOS-adding tokenizer is BOS (id 1); without special tokens it is ' Yes'; Qwen2 adds no BOS."
    f = by_line(lint([FIX/'field/encode_first.py'], llama, 'llava15'), 'encode_first.py')
    assert [(f[n].ids, f[n].spells, f[n].verdict) for n in (4, 5, 9, 14)] == [
        ([1], ['<s>'], 'special'), ([1], ['<s>'], 'special'), ([3869], [' Yes'], 'derived'), ([3582], ['yes'], 'excluded')]
    assert 'BOS' in f[4].detail and f[17].verdict == 'suspect'
    q = by_line(lint([FIX/'field/encode_first.py'], qwen, 'llava15'), 'encode_first.py')
    assert (q[4].ids, q[4].spells, q[4].verdict) == ([9454], ['Yes'], 'excluded')
    qv = by_line(lint([FIX/'field/encode_first.py'], qwen, 'qwen2-vl'), 'encode_first.py')
    assert qv[4].verdict == 'derived'                      # the chat template starts the answer on a new line: no space


def test_lookup_of_both_words(tmp_path, llama):
    "convert_tokens_to_ids(['▁Yes', '▁No']) judges each id for its own word; the bare words are excluded after 'ASSISTANT:'."
    (tmp_path/'pair.py').write_text("def ids(tokenizer):\n    return tokenizer.convert_tokens_to_ids(['▁Yes', '▁No']), tokenizer.convert_tokens_to_ids(['Yes', 'No'])\n")
    r = lint([tmp_path], llama, 'llava15')
    assert [(f.ids, f.spells, f.verdict) for f in r.findings] == [([3869, 1939], [' Yes', ' No'], 'derived'), ([8241, 3782], ['Yes', 'No'], 'excluded')]


def test_notebook_cells(llama):
    "A notebook's finds are placed at cell:line, magics and shell lines skipped."
    r = lint([FIX/'field/eval_notebook.ipynb'], llama, 'llava15')
    assert [(f.cell, f.line, f.verdict) for f in r.findings] == [(3, 2, 'special'), (3, 3, 'special')]
    assert r.findings[0].where.endswith('eval_notebook.ipynb:cell 3:2')


def test_parser_readings(llama):
    "Each parser's reading of the battery, from a model of its rule."
    r = lint([FIX/'field/pope_style_parse.py', FIX/'field/string_rules.py', FIX/'field/label_dependent.py'], llama, 'llava15')
    pope = by_line(r, 'pope_style_parse.py')[13]
    assert pope.verdict == 'disagrees' and "POPE's default-yes" in pope.detail
    assert pope.reading == {'Yes': 'yes', 'yes': 'yes', 'Yes.': 'yes', 'Yes, there is a dog in the image.': 'yes', 'NO': 'yes', 'No.': 'no',
                            'Nope': 'yes', 'None': 'yes', 'Not sure': 'yes', 'There is no dog in the image.': 'no', 'I cannot tell': 'yes',
                            'Yes and no': 'no', '': 'yes'}
    rules = by_line(r, 'string_rules.py')
    assert [rules[n].reading['Yes.'] for n in (8, 15, 19)] == ['unknown', 'yes', 'yes']
    assert rules[8].detail.startswith('exact match') and rules[15].detail.startswith('substring') and rules[19].detail.startswith('prefix')
    lab = by_line(r, 'label_dependent.py')[6]
    assert lab.verdict == 'label-dependent' and lab.reading['Yes and no'] == 'credited' and lab.reading[''] == 'not credited'
    assert len(r.findings) == 6                            # the loop that turns gold labels into 1/0 is not a readout


def test_model_agrees_with_the_rules_it_models(llama, tmp_path):
    "Lint's model of the package's own POPE, exact-match and VLMEvalKit rules reads the battery as the functions themselves do."
    from pope_audit import readouts
    from pope_audit.readouts import Record
    from pope_audit.lint import SILENCE
    bare = tmp_path/'readouts.py'                 # the package marks these rules `# pope-audit: ok`: read them without the marks
    bare.write_text(SILENCE.sub('#', (ROOT/'pope_audit/readouts.py').read_text()))
    assert lint([ROOT/'pope_audit/readouts.py'], llama, 'llava15').exit_code() == 0
    r = lint([bare], llama, 'llava15')
    got = {f.what: f.reading for f in r.findings}
    for name in ('pope_parse', 'lmms_exact', 'vlmeval_yorn'):
        fn = getattr(readouts, name)
        assert got[f'def {name}(…)'] == {a: fn(Record('random', 1, 'x.jpg', 'q', 'yes', text=a)) for a in BATTERY}


def test_fix_agrees_with_greedy(llama):
    "The clean example (derived ids, first-word parser) passes; its legacy pair is silenced; the helper file has no decision."
    r = lint([FIX/'clean'], llama, 'llava15')
    assert [(f.line, f.verdict) for f in r.findings] == [(4, 'derived'), (5, 'derived'), (11, 'agrees')]
    assert (r.silenced, [Path(u).name for u in r.undecided], r.exit_code()) == (1, ['helpers.py'], 0)
    assert greedy_reading('Yes, there is') == 'yes' and greedy_reading('Nope') == 'unknown'


def test_bad_input_one_line_each(tmp_path, llama):
    "Not Python, binary, too large, broken notebook, syntax error: one line each; the good file beside them is still linted."
    big = tmp_path/'big.py'
    big.write_text('x = 1\n' * 400_000)
    r = lint([FIX/'bad', FIX/'bad/notes.txt', big, tmp_path/'missing.py'], llama, 'llava15')
    assert sorted(b.split(': ', 1)[1] for b in r.bad) == sorted([
        'a binary file, not Python', 'broken notebook JSON (Expecting value)', 'syntax error: invalid syntax',
        'not a Python file or notebook', 'too large to be an evaluation script (2,400,000 bytes > 2,000,000)', 'no such file or folder'])
    assert any(b.endswith('syntax_error.py:1: syntax error: invalid syntax') for b in r.bad)
    assert [(Path(f.file).name, f.verdict) for f in r.findings] == [('good_enough.py', 'excluded')]
    assert r.exit_code() == 2


def test_cli_exit_codes_and_json(capsys, shared, tmp_path):
    gguf = shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    assert run_cli(capsys, 'lint', FIX/'clean', '--tokenizer', gguf)[0] == 0
    assert run_cli(capsys, 'lint', FIX/'clean', '--tokenizer', gguf.parent, '--gguf-file', gguf.name)[0] == 0
    code, out = run_cli(capsys, 'lint', FIX/'field/transferred_ids.py', '--tokenizer', shared/'tokenizers/qwen2', '--json')
    assert code == 1 and [f['spells'] for f in json.loads(out)['findings']][:2] == [[' }}'], ['?\n\n']]
    code, out = run_cli(capsys, 'lint', FIX/'field', '--tokenizer', gguf, '--json')
    doc = json.loads(out)
    assert code == 1 and doc['tokenizer'] == str(gguf)
    assert all({'file', 'line', 'kind', 'ids', 'spells', 'verdict', 'fix'} <= set(f) for f in doc['findings'])
    assert {f['verdict'] for f in doc['findings']} == {'derived', 'excluded', 'special', 'suspect', 'disagrees', 'label-dependent'}
    assert run_cli(capsys, 'lint', FIX/'bad', FIX/'clean', '--tokenizer', gguf)[0] == 2
    # suspect fails only with --strict; --exclude skips a file; the marker silences a line
    (tmp_path/'cfg.py').write_text('def ids(tok, cfg):\n    return tok.encode(cfg.yes_word, add_special_tokens=False)[-1]\n')
    assert run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf)[0] == 0
    assert run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf, '--strict')[0] == 1
    (tmp_path/'old.py').write_text('YES_ID = 3582\n')
    assert run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf, '--exclude', 'old.py')[0] == 0
    assert run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf)[0] == 1
    (tmp_path/'old.py').write_text('YES_ID = 3582  # pope-audit: ok\n')
    code, out = run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf)
    assert code == 0 and '1 silenced' in out


def test_pre_commit_hook(capsys, shared):
    "The shipped hook runs `pope-audit lint` with the user's args and the staged files appended, as pre-commit calls it."
    hook, = yaml.safe_load((ROOT/'.pre-commit-hooks.yaml').read_text())
    assert hook['id'] == 'pope-audit-lint' and set(hook['types_or']) == {'python', 'jupyter'}
    prog, *sub = hook['entry'].split()
    assert prog == 'pope-audit'
    gguf = shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    assert run_cli(capsys, *sub, '--tokenizer', gguf, FIX/'clean/derived_readout.py', FIX/'field/two_token_logits.py')[0] == 1


LIGHT = '''
import sys
from pathlib import Path
from pope_audit.lint import read_sources, scan
n = sum(len(scan(s)) for p in sorted(Path(sys.argv[1]).rglob('*.py')) for s in read_sources(p))
heavy = [m for m in ('torch', 'transformers.modeling_utils', 'transformers.models.auto.modeling_auto') if m in sys.modules]
print(n, heavy)
'''


def test_static_reading_is_light():
    "Finding the decisions loads neither torch nor transformers' model code (a fresh process)."
    out = subprocess.run([sys.executable, '-c', LIGHT, str(FIX/'field')], capture_output=True, text=True, check=True).stdout.split(maxsplit=1)
    assert int(out[0]) > 10 and out[1].strip() == '[]'


def test_lint_command_is_light(shared):
    "`pope-audit lint` in a fresh process imports no torch."
    gguf = shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    code = ('import sys\nfrom pope_audit.cli import main\ntry: main(sys.argv[1:])\nexcept SystemExit: pass\n'
            "print('TORCH', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, '-c', code, 'lint', str(FIX/'clean'), '--tokenizer', str(gguf)], capture_output=True, text=True).stdout
    assert 'TORCH False' in out
