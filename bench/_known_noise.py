"""A training job whose gradient noise is known exactly: a linear regression, y = x.w* + 0.5 noise
over 4,096 fixed samples of 8 features, trained by plain SGD at learning rate 0 (the weights stay
at 0, so every step draws its gradient from one distribution). :func:`exact` gives that
distribution's |G|^2 and tr(Sigma) from the per-sample gradients.

    python _known_noise.py        # under spottrain run: the job (steps and batch from the run)

Used by bench/noise_scale.py and tests/test_own_curves.py.
"""

import torch

N, D = 4096, 8


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, D, generator=g)
    y = X @ torch.linspace(-1.0, 1.0, D) + 0.5 * torch.randn(N, generator=g)
    return X, y


def exact() -> tuple[float, float]:
    """(|G|^2, tr Sigma per sample) of the data's gradient at w = 0."""
    X, y = data()
    per_sample = -2.0 * X * y[:, None]  # d/dw (x.w - y)^2 at w = 0
    G = per_sample.mean(0)
    return float(G @ G), float(((per_sample - G) ** 2).sum(1).mean())


def main() -> None:
    from spottrain.runtime import Trainer, TrainConfig

    X, y = data()

    class Data:
        def __len__(self) -> int:
            return N

        def get_batch(self, idx):
            return X[idx], y[idx]

    model = torch.nn.Linear(D, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)

    def loss_fn(m, batch):
        x, t = batch
        return ((m(x).squeeze(-1) - t) ** 2).mean()

    Trainer(model=model, optimizer=opt, dataset=Data(), loss_fn=loss_fn, config=TrainConfig.from_env()).fit()


if __name__ == "__main__":
    main()
