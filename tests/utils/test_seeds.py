"""The one seed module: each function keeps the values the code it replaced gave (recorded runs depend on them)."""

from dreamgym.utils.seeds import ROLLOUT_BASIS, mix_seed, row_seed, text_seed


def test_mix_seed_keeps_the_trainer_and_rollout_streams():
    # Values the trainers' `mix_seed` and the rollout's former `_mix` gave for these inputs.
    assert mix_seed(0, 3, 11) == 1053017669  # run loop: iteration 3's task draw
    assert mix_seed(7, 2, basis=ROLLOUT_BASIS) == 1986064126  # rollout: environment seed of task 2
    assert mix_seed(7, 7919, 5, basis=ROLLOUT_BASIS) == 174111484  # rollout: sampling seed of turn 5
    assert mix_seed(1, 2) != mix_seed(1, 2, basis=ROLLOUT_BASIS)
    assert 0 <= mix_seed(-5, 2**40) < 2**31 and mix_seed(2**32 + 4) == mix_seed(4)


def test_text_seed_is_the_crc_of_the_joined_parts():
    assert text_seed("t1#0", "press 2") == 327392059  # the synthetic environment's shared-noise seed
    assert text_seed("a", "b") != text_seed("a\x1fb", "") and text_seed("ab") != text_seed("a", "b")


def test_row_seed_is_the_seed_itself_for_row_zero():
    assert row_seed(5, 0) == 5 and row_seed(5, 3) == 15755400384260043844
    assert len({row_seed(9, i) for i in range(100)}) == 100
