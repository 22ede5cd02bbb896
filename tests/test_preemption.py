"""Preemption on one process: SIGTERM becomes a flag that the next step boundary reads."""

import os
import signal

from seed_jax.train.preemption import Preempted, install_sigterm_flag, preemption_requested


def test_sigterm_on_one_process_is_read_at_the_next_boundary():
    before = signal.getsignal(signal.SIGTERM)
    try:
        install_sigterm_flag()
        assert not preemption_requested(0)
        os.kill(os.getpid(), signal.SIGTERM)  # without the handler this would end the test process
        assert preemption_requested(1) and preemption_requested()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # a second SIGTERM kills at once
        install_sigterm_flag()
        assert not preemption_requested(2)  # installing again starts from no request
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_stop_line_names_the_update_or_the_stage():
    assert str(Preempted(3)) == "preempted at update 3; relaunch to resume"
    assert str(Preempted(stage="collect")) == "preempted at the end of stage collect; relaunch to resume"
    assert str(Preempted(stage="collect", progress="4 of 8 tasks")) == \
        "preempted in stage collect after 4 of 8 tasks; relaunch to resume"
