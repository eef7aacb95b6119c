"""Coverage-guided fuzzing (atheris) of banditk's parsers and of ``observe``.

    python fuzz/fuzz_inputs.py -max_total_time=60            # about a minute (make test)
    python fuzz/fuzz_inputs.py -max_total_time=3600          # longer, by hand (make fuzz)

Crashing inputs land in fuzz/crashes/; keep them: tests/test_fuzz_regressions.py
replays every file there.
"""

import sys
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

with atheris.instrument_imports(include=["banditk"]):
    import targets


def main() -> None:
    corpus = HERE / "corpus"
    if not any(corpus.glob("*")):
        targets.seed_corpus(corpus)
    args = [sys.argv[0], *sys.argv[1:], f"-artifact_prefix={HERE / 'crashes'}/", str(corpus)]
    atheris.Setup(args, targets.check_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
