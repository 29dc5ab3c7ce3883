"""An engine worker on the CPU around a tiny model, for tests that drive its generate path."""

from __future__ import annotations


class Recorder:
    """An outbox that runs deferred work at once, in the caller's thread."""

    def __init__(self) -> None:
        self.msgs: list = []

    def send(self, msg) -> None:
        self.msgs.append(msg)

    def defer(self, fn, *args) -> None:
        self.msgs.extend(fn(*args) or ())

    call = defer


class Inline(Recorder):
    """A recorder that is also the engine's outbox."""

    def flush(self) -> None:
        pass


def make_engine(model_dir, **overrides):
    """An engine on the CPU around the model in ``model_dir``, loaded through the real path,
    and the outbox it writes to (``overrides``: spec fields)."""
    from loadtest.backends.transformers.engine import Engine
    from loadtest.backends.transformers.loading import load_model
    from loadtest.config.transformers_spec import TransformersSpec

    spec = TransformersSpec(
        **{
            "model": str(model_dir),
            "device": "cpu",
            "dtype": "float32",
            "seed": 0,
            "attn_implementation": None,
            "trust_remote_code": False,
            "mode": "static",
            "compile": False,
            "max_batch_size": 8,
            "max_wait_ms": 0,
            **overrides,
        }
    )
    out = Inline()
    return Engine(spec, ".", out, loaded=load_model(spec, ".")), out


def input_shapes(eng, outputs: list | None = None) -> list:
    """The input_ids shape of every generate() call the engine makes from now on (and, into
    ``outputs``, the sequences each returned)."""
    shapes: list = []
    generate = eng.model.generate

    def spy(**kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        sequences = generate(**kwargs)
        if outputs is not None:
            outputs.append(sequences)
        return sequences

    eng.model.generate = spy
    return shapes


def compile_eagerly(model) -> None:
    """Compiled decode steps on the CPU, traced by torch.compile's eager backend as inductor
    would trace them, with no C compiler (transformers compiles on CUDA only unless told)."""
    import transformers

    config = transformers.CompileConfig(backend="eager", mode=None, fullgraph=True)
    config._compile_all_devices = True
    model.generation_config.compile_config = config


def last_stamp(msg):
    """The last stamp of a worker message: a tokens message's last token, or a message's own."""
    return msg[1][-1] if msg[0] == "tokens" else msg[1]


def req(rid, cap, eos=None):
    """A worker's request message: rid, a 3-token prompt, ``cap`` new tokens, fixed unless an
    ``eos`` id is given."""
    return ("req", rid, [1, 2, 3], cap, eos is None, eos)
