# Type stubs of the native module (python/src/*.rs); pulsed/__init__.py
# wraps it with numpy conversion and is typed inline.
from os import PathLike
from typing import Callable, List, Optional, Union, final

__all__ = [
    "DEFAULT_LANGUAGE",
    "DEFAULT_MODEL",
    "LiveEvent",
    "LiveSession",
    "Model",
    "PulsedError",
    "SHIPPED_MODEL",
    "Segment",
    "Transcription",
    "Word",
    "read_manifest",
    "resample",
    "resume_jsonl",
    "set_strict",
    "_panic_for_tests",
]

DEFAULT_MODEL: str
DEFAULT_LANGUAGE: str
SHIPPED_MODEL: str

class PulsedError(RuntimeError):
    """What went wrong, in the one line the command line prints."""

@final
class Word:
    text: str
    start: float
    end: float
    confidence: float
    def to_dict(self) -> dict: ...

@final
class Segment:
    start: float
    end: float
    text: str
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    temperature: float

@final
class Transcription:
    text: str
    words: List[Word]
    segments: List[Segment]
    language: Optional[str]
    duration: float
    path: Optional[str]
    error: Optional[str]
    @property
    def ok(self) -> bool: ...
    def to_dict(self) -> dict: ...

@final
class LiveEvent:
    kind: str
    text: str
    words: List[Word]
    stable: int
    utterance: int
    time: float
    @property
    def is_final(self) -> bool: ...

@final
class LiveSession:
    @property
    def sample_rate(self) -> int: ...
    @property
    def ended(self) -> bool: ...
    def push(self, samples: bytes) -> None: ...
    def finish(self) -> None: ...
    def poll(self) -> List[LiveEvent]: ...
    def next_event(self, timeout: Optional[float] = None) -> Optional[LiveEvent]: ...
    def __iter__(self) -> LiveSession: ...
    def __next__(self) -> LiveEvent: ...

@final
class Model:
    def __new__(
        cls,
        name_or_dir: Optional[Union[str, PathLike[str]]] = None,
        device: str = "auto",
        precision: str = "f32",
        language: Optional[str] = None,
        *,
        beam: Optional[int] = None,
        task: str = "transcribe",
        whole: bool = False,
        pulse: int = 5120,
        word_timestamps: bool = True,
        initial_prompt: Optional[str] = None,
        no_condition: bool = False,
        without_timestamps: bool = False,
        vad: bool = False,
        batch_size: Optional[int] = None,
        no_speech_gate: bool = False,
        no_fallback: bool = False,
        padding: Optional[str] = None,
        ctc: bool = False,
        lm: Optional[Union[str, PathLike[str]]] = None,
        no_lm: bool = False,
        lm_weight: Optional[float] = None,
        word_bonus: Optional[float] = None,
        oov_penalty: Optional[float] = None,
        tf32: bool = False,
    ) -> Model: ...
    @property
    def name(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def sample_rate(self) -> int: ...
    def describe(self) -> Optional[str]: ...
    def transcribe_file(self, path: Union[str, PathLike[str]]) -> Transcription: ...
    def transcribe_samples(self, samples: bytes, sample_rate: int) -> Transcription: ...
    def transcribe_many(
        self,
        paths: List[str],
        jobs: Optional[int] = None,
        streams: Optional[int] = None,
        progress: Optional[Callable[[Transcription, int, int], object]] = None,
    ) -> List[Transcription]: ...
    def stream(
        self,
        *,
        sample_rate: Optional[int] = None,
        end_silence: float = 0.6,
        vad: bool = True,
        step: float = 1.0,
        trim: float = 15.0,
        paced: bool = True,
        window_encoder: bool = False,
        second_pass: Optional[bool] = None,
        greedy_partials: Optional[bool] = None,
        policy: Optional[str] = None,
        margin: Optional[int] = None,
        backstep: int = 25,
        show: int = 2,
        refill: bool = False,
        repeats: int = 3,
        untexted_speech: float = 1.5,
        final_beam: int = 1,
    ) -> LiveSession: ...

def resample(samples: bytes, from_rate: int, to_rate: int) -> bytes: ...
def set_strict(strict: bool) -> None: ...
def read_manifest(path: Union[str, PathLike[str]]) -> List[str]: ...
def resume_jsonl(path: Union[str, PathLike[str]]) -> List[str]: ...
def _panic_for_tests(message: str) -> None: ...
