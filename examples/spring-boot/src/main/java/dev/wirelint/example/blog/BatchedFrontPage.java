package dev.wirelint.example.blog;

import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.data.domain.PageRequest;
import org.springframework.data.domain.Sort;
import org.springframework.stereotype.Service;

/**
 * The front page in two queries whatever its length: the posts, then their
 * authors in one {@code findAllById} (an {@code $in} on {@code _id}).
 */
@Service
@ConditionalOnProperty(name = "blog.authors", havingValue = "batched")
public class BatchedFrontPage implements FrontPage {
  private final PostRepository posts;
  private final AuthorRepository authors;

  public BatchedFrontPage(PostRepository posts, AuthorRepository authors) {
    this.posts = posts;
    this.authors = authors;
  }

  @Override
  public List<Entry> latest(int limit) {
    List<Post> page = posts.findAllBy(PageRequest.of(0, limit, Sort.by(Sort.Direction.DESC, "id")));
    if (page.isEmpty()) {
      return List.of();
    }
    Map<String, String> names =
        authors.findAllById(page.stream().map(Post::getAuthorId).distinct().toList()).stream()
            .collect(Collectors.toMap(Author::getId, Author::getName, (a, b) -> a));
    return page.stream().map(p -> new Entry(p.getTitle(), names.get(p.getAuthorId()))).toList();
  }
}
