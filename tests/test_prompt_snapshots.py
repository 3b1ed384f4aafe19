"Frozen prompts: the exact prompt text and token ids (image run collapsed) for one question per family."
import pytest
from pope_audit.models.tiny import TINY, stand_in_image
from pope_audit.models.adapters import Llava15, LlavaNext, Qwen2VL, InstructBlip

Q = 'Is there a snowboard in the image?'
SW = '\nAnswer the question using a single word or phrase.'
SNAPSHOTS = {
    'llava15': (Llava15, 'USER: <image>\nIs there a snowboard in the image?\nASSISTANT:', (5, 581), 581,
                [1, 3148, 1001, 29901, 29871, [32000, 576], 13, 3624, 727, 263, 15007, 3377, 297, 278, 1967, 29973, 13,
                 22933, 9047, 13566, 29901]),
    'llava-next': (LlavaNext, '[INST] <image>\nIs there a snowboard in the image?' + SW + ' [/INST]', (5, 2345), 2345,
                   [1, 518, 25580, 29962, 29871, [32000, 2340], 13, 3624, 727, 263, 15007, 3377, 297, 278, 1967, 29973, 13,
                    22550, 278, 1139, 773, 263, 2323, 1734, 470, 16549, 29889, 518, 29914, 25580, 29962]),
    'qwen2-vl': (Qwen2VL, '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|>'
                 '<|image_pad|><|vision_end|>Is there a snowboard in the image?' + SW + '<|im_end|>\n<|im_start|>assistant\n',
                 (15, 406), 407,
                 [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 151652, [151655, 391],
                  151653, 3872, 1052, 264, 11794, 2482, 304, 279, 2168, 5267, 16141, 279, 3405, 1667, 264, 3175, 3409, 476,
                  17133, 13, 151645, 198, 151644, 77091, 198]),
    'instructblip': (InstructBlip, 'Is there a snowboard in the image?' + SW, (0, 32), 0,
                     [[32001, 32], 1, 1317, 727, 263, 15007, 3377, 297, 278, 1967, 29973, 13, 22550, 278, 1139, 773, 263,
                      2323, 1734, 470, 16549, 29889]),
}


def collapse(ids, image_id):
    out = []
    for t in ids:
        if out and isinstance(out[-1], list) and out[-1][0] == t: out[-1][1] += 1
        elif t == image_id: out.append([t, 1])
        else: out.append(t)
    return out


@pytest.mark.parametrize('family', list(SNAPSHOTS))
def test_prompt_snapshot(shared, family):
    cls, text, span, split, ids = SNAPSHOTS[family]
    a = cls(*TINY[family]())
    assert a.prompt(Q) == text
    enc = a.encode(stand_in_image('COCO_val2014_000000310196.jpg'), [Q])
    assert (enc.span, enc.split) == (span, split)
    assert collapse(enc.ids[0], a.image_token_id) == ids
