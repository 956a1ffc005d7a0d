"""The baseline a text classifier must beat: character n-grams and a linear model.

TF-IDF of character 1- to 3-grams inside word boundaries (``char_wb``) and multinomial logistic
regression: the classic strong baseline for language identification (Cavnar & Trenkle 1994
count character n-grams; linear models over them are what langid.py and fastText build on).
"""

from __future__ import annotations

from tfspec.errors import TfspecError


def char_ngram_accuracy(train: tuple[list[str], list[str]], test: tuple[list[str], list[str]]) -> float:
    """Accuracy on ``test`` of the baseline fitted on ``train`` (texts, labels)."""
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
    except ImportError:
        raise TfspecError("the character n-gram baseline needs scikit-learn: pip install 'tfspec[baseline]'") from None
    model = make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3)), LogisticRegression(max_iter=1000))
    model.fit(*train)
    return float((model.predict(test[0]) == test[1]).mean())
