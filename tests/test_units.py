import pytest

from geryon.units import format_rate, parse_rate


@pytest.mark.parametrize(
    ("text", "bps"),
    [("10gbit", 1e10), ("40Gbps", 4e10), ("800mbit", 8e8), ("2.5e9", 2.5e9), ("1e3kbit", 1e6), (125, 125.0)],
)
def test_parse_rate_reads_bits_per_second(text, bps):
    assert parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text", ["10g", "abc", "-1gbit", "nan", "inf", "", "10 gigabit"])
def test_parse_rate_refuses_what_is_not_a_rate(text):
    with pytest.raises(ValueError, match=r"--bandwidth: .* not a rate"):
        parse_rate(text, "--bandwidth")


@pytest.mark.parametrize("text", ["0", "0gbit", 0, -5.0])
def test_parse_rate_refuses_zero_and_negative(text):
    with pytest.raises(ValueError, match="above 0"):
        parse_rate(text)


def test_parse_rate_refuses_byte_rates():
    with pytest.raises(ValueError, match="bytes per second"):
        parse_rate("10GBps")


def test_format_rate_picks_the_largest_unit():
    assert format_rate(1e10) == "10 Gbit/s"
    assert format_rate(2.5e8) == "250 Mbit/s"
    assert format_rate(999) == "999 bit/s"
