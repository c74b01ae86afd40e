#[egpu::helper]
fn clamp(x: u64) -> u64 {
    if x > 10 {
        return 10;
    }
    x
}

fn main() {}
