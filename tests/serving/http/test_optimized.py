"""`labkit serve --optimize fuse,int4` and `fuse,q4_1`: the serving engine on labkit.fast's 4-bit weights, in
torch (int4) or on labkit's own Q4_1 x Q8_1 kernel for every row of a batch or packed prompt (q4_1) (notebook 13),
and with its decode step compiled (`--compile`).

The optimized server answers through the official `openai` client exactly what labkit's generation
loop gives on the same optimized model, for concurrent requests too; bad steps are refused on the
command line with what is allowed. Each answer is compared up to its first narrow greedy step: the 4-bit
kernels round activations and logits to bfloat16 (steps of 0.125 at these logits), so candidates one or
two such steps apart may swap between a batch of requests and a single one."""

import concurrent.futures
import functools

import httpx
import openai
import pytest

import labkit
from labkit.core.forward import all_logits
from labkit.serving.http import start_server
from labkit.serving.http.server import parse_args

MODEL = "smollm2-135m"
STEPS = ("fuse", "int4")
QUESTIONS = [
    "Name three primary colors.",
    "What is 2 + 2?",
    "Say hello in French.",
    "What is the capital of Italy?",
    "Count from one to five.",
]
WIDE = 0.5  # logits between the best and second-best token at every compared step


def test_optimize_steps_are_read_and_checked_on_the_command_line(capsys):
    assert parse_args([]).optimize == ()
    assert parse_args(["--optimize", "fuse, int4"]).optimize == STEPS
    with pytest.raises(SystemExit):
        parse_args(["--optimize", "int4,fuse"])
    assert "Steps must come in this order" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--optimize", "turbo"])
    assert "Unknown steps ['turbo']" in capsys.readouterr().err


@functools.cache
def sure_answers(steps: tuple[str, ...]) -> list[tuple[str, int]]:
    """For each of QUESTIONS, labkit's generation loop on the model optimized with `steps`: the text of its
    greedy answer up to its first narrow step, and how many tokens that is. Cached: the eager and the compiled
    server of the same steps are held to the same answers, so the model is loaded and run once for both."""
    model, tokenizer = labkit.load_model(MODEL, impl="labkit")
    labkit.optimize(model, steps)
    sure_texts = []
    for question in QUESTIONS:
        prompt_ids = labkit.chat_prompt(tokenizer, [{"role": "user", "content": question}])
        new_ids = labkit.generate_ids(model, tokenizer, prompt_ids, max_new_tokens=8)
        top2 = all_logits(model, prompt_ids + new_ids)[len(prompt_ids) - 1 : -1].topk(2, dim=-1).values
        narrow = [step for step, gap in enumerate((top2[:, 0] - top2[:, 1]).tolist()) if gap < WIDE]
        sure = narrow[0] if narrow else len(new_ids)  # tokens before the first narrow step
        sure_texts.append((tokenizer.decode(new_ids[:sure], skip_special_tokens=True), sure))
    return sure_texts


@pytest.mark.slow
@pytest.mark.parametrize(
    "steps, compile",
    [(STEPS, False), (("fuse", "q4_1"), False), (("fuse", "q4_1"), True)],
    ids=["int4", "q4_1", "q4_1-compiled"],
)
def test_an_optimized_server_answers_what_the_optimized_model_generates(steps, compile):
    # A compiled server compiles its step for every batch size up to its seats before it serves (about 40 s
    # each on 2 cores with a cold inductor cache): two seats still batch the five concurrent questions.
    seats = 2 if compile else 4
    with start_server(MODEL, max_num_seqs=seats, optimize=steps, compile=compile) as server:
        step = httpx.get(server.url + "/health").json()["decode_step"]
        assert step.startswith("compiled for batch sizes 1, 2 (") if compile else step == "eager"
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)

        def ask(question: str) -> str:
            answer = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": question}], max_tokens=8, temperature=0
            )
            return answer.choices[0].message.content

        with concurrent.futures.ThreadPoolExecutor(len(QUESTIONS)) as pool:
            answers = list(pool.map(ask, QUESTIONS))
        assert f"({', '.join(steps)})" in server.log.read_text()
    compared = 0
    for question, answer, (sure_text, sure) in zip(QUESTIONS, answers, sure_answers(steps)):
        assert answer.startswith(sure_text), (question, answer)
        compared += sure
    assert compared >= 5, f"only {compared} tokens had wide margins; add questions"
