"""A kill -9 at a known point, for the kill-and-resume tests (they put this folder first on PYTHONPATH).

With VOCABTRANSFER_KILL_AFTER_CHECKPOINT=N set, the process that writes checkpoint N's metrics rows (the
file that marks a checkpoint complete) sends SIGKILL, right after, to the `accelerate launch` process that
started it and to everything that launcher started (every rank: torch's launcher gives each rank a session
of its own, so one killpg would not reach them), itself last, as a scheduler's kill of the job would. The
run dies between checkpoint N and the next step; a test that polled the folder instead could miss a tiny
model's whole run on a loaded machine."""

import os

_STEP = os.environ.get("VOCABTRANSFER_KILL_AFTER_CHECKPOINT")
if _STEP:
    import signal

    from transformers.trainer_callback import CallbackHandler

    _on_save = CallbackHandler.on_save

    def _kill_the_run() -> None:
        import psutil

        me = psutil.Process()
        launcher = me.parent()
        if launcher is None or "accelerate.commands.launch" not in " ".join(launcher.cmdline()):
            raise RuntimeError("VOCABTRANSFER_KILL_AFTER_CHECKPOINT is for runs under `accelerate launch`")
        for process in [launcher, *launcher.children(recursive=True)]:
            if process.pid != me.pid:
                process.send_signal(signal.SIGKILL)
        os.kill(me.pid, signal.SIGKILL)

    def on_save(self, args, state, control):
        control = _on_save(self, args, state, control)
        if state.global_step == int(_STEP) and state.is_world_process_zero:
            _kill_the_run()
        return control

    CallbackHandler.on_save = on_save

    # Every rank but the first writes its RNG state at checkpoint N slowly, half a file first: a run that marked
    # the checkpoint complete before every rank's files were whole is killed with one of them torn, every time,
    # rather than when the machine happens to be loaded.
    from transformers import Trainer

    _save_rng_state = Trainer._save_rng_state

    def _slow_save_rng_state(self, output_dir):
        if self.state.global_step == int(_STEP) and not self.is_world_process_zero():
            import time

            os.makedirs(output_dir, exist_ok=True)
            partial = os.path.join(output_dir, f"rng_state_{self.args.process_index}.pth")
            with open(partial, "wb") as fh:
                fh.write(b"PK\x03\x04 half a zip archive")
            time.sleep(2.0)
        _save_rng_state(self, output_dir)

    Trainer._save_rng_state = _slow_save_rng_state

# With VOCABTRANSFER_KILL_IN_WRITE=<prefix> set (tests/crash_matrix.py), the first atomic write of this process
# whose final path starts with <prefix> kills the process group (the whole run, Snakemake with it) after the
# temporary file or directory is written and before it is renamed into place: a crash inside a write.
_PREFIX = os.environ.get("VOCABTRANSFER_KILL_IN_WRITE")
if _PREFIX:
    import contextlib
    import signal

    import vocabtransfer.io as _io

    _atomic = _io.atomic_output

    @contextlib.contextmanager
    def _killing(path, **kwargs):
        with _atomic(path, **kwargs) as tmp:
            yield tmp
            if os.path.relpath(os.path.abspath(path)).startswith(_PREFIX):
                os.killpg(os.getpgrp(), signal.SIGKILL)

    _io.atomic_output = _killing
