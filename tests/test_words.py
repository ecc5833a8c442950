from tfx_cli.words import counted


def test_counted_nouns():
    assert counted(1, "layer") == "1 layer"
    assert counted(12, "layer") == "12 layers"
    assert counted(0, "token") == "0 tokens"
    assert counted(3, "more head") == "3 more heads"
    assert counted(1, "query position (row of x)", "query positions (rows of x)") == \
        "1 query position (row of x)"
    assert counted(2, "query position (row of x)", "query positions (rows of x)") == \
        "2 query positions (rows of x)"
