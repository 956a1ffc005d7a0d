"""The baseline a text classifier must beat: character n-grams and a linear model.

TF-IDF of character 1- to 3-grams inside word boundaries (``char_wb``) and multinomial logistic
regression: the classic strong baseline for language identification (Cavnar & Trenkle 1994
count character n-grams; linear models over them are what langid.py and fastText build on).
For a token task the same model classifies each word alone: what character n-grams tell
without context, the floor a model reading the whole line must beat.
"""

from __future__ import annotations

from tfspec.errors import TfspecError


def char_ngram_accuracy(train: tuple[list[str], list[str]], test: tuple[list[str], list[str]]) -> float:
    """Accuracy on ``test`` of the baseline fitted on ``train`` (texts, labels)."""
    model = _char_ngrams()
    model.fit(*train)
    return float((model.predict(test[0]) == test[1]).mean())


def word_char_ngram_accuracy(train: tuple[list[list[str]], list[list[str]]],
                             test: tuple[list[list[str]], list[list[str]]]) -> float:
    """Word accuracy on ``test`` of the baseline fitted on every word of ``train`` (lines of
    words, lines of their labels), each word classified alone."""
    def flat(lines: list[list[str]]) -> list[str]:
        return [item for line in lines for item in line]

    return char_ngram_accuracy(tuple(map(flat, train)), tuple(map(flat, test)))


def _char_ngrams():
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
    except ImportError:
        raise TfspecError("the character n-gram baseline needs scikit-learn: pip install 'tfspec[baseline]'") from None
    return make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3)), LogisticRegression(max_iter=1000))
